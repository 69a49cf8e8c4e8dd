//! A real Slurm: a single-node cluster (slurmctld, slurmd and munged from Debian's `slurm-wlm`
//! and `munge` packages) brought up in a temporary directory, as root, runs the array script
//! that `dasim sweep --emit-slurm` writes for a small sweep; `dasim sweep merge` of what the
//! array tasks wrote must equal the merge of a local `dasim sweep` of the same scenario.
//!
//! The daemons run in the foreground as children of the test, configured only by files in the
//! temporary directory (their own ports, state, spool, munge socket and key), so nothing of
//! the machine's own Slurm or munge is used or changed. A guard cancels the job and stops the
//! daemons when the test ends, passed or failed, so nothing is left running.
//!
//! Where it cannot run (not Linux, not root, the packages not installed), the test prints what
//! it skipped and why, and passes; `tests/run.sh` installs the packages where it can and then
//! sets `DASIM_REQUIRE_SLURM=1`, which turns a skip into a failure.

use crate::common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{SWEEP_BASE, dasim, stderr};

/// How long the array job may take, from submission to its last task's end.
const JOB_TIMEOUT: Duration = Duration::from_secs(180);
/// How long the daemons may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The programs the test needs.
const PROGRAMS: &[&str] = &[
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "sinfo",
    "scancel",
];

/// The sweep submitted to Slurm and run locally: the sweep tests' base scenario, swept.
const SWEEP: &str = r#"[sweep]
"cluster.stragglers[0].factor" = [1, 4]
seed = "1..=2"
"#;

/// Why the test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if !cfg!(target_os = "linux") {
        return Some("not Linux".into());
    }
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some(
            "not root (the daemons run as root, configured in a temporary directory)".into(),
        );
    }
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .copied()
        .filter(|p| find(p).is_none())
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "{} not installed (apt-get install slurm-wlm munge; tests/run.sh does it where it can)",
            missing.join(", ")
        ));
    }
    None
}

/// The path of program `name`, searched in `PATH` and the sbin directories.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/usr/local/sbin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// A TCP port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The daemons of the test cluster; dropping it cancels the job and stops them.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
    job: Option<String>,
}

impl Cluster {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A Slurm client command (`sbatch`, `squeue`, ...) of this cluster.
    fn client(&self, program: &str) -> Command {
        let mut c = Command::new(find(program).expect("checked before"));
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn spawn(&mut self, name: &'static str, program: &str, args: &[&str]) {
        let log = std::fs::File::create(self.path(&format!("{name}.out"))).unwrap();
        let child = Command::new(find(program).expect("checked before"))
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        self.daemons.push((name, child));
    }

    /// The last lines of every log of the cluster, for a failure message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for name in [
            "munged.out",
            "slurmctld.out",
            "slurmctld.log",
            "slurmd.out",
            "slurmd.log",
        ] {
            let text = std::fs::read_to_string(self.path(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            out.push_str(&format!("--- {name}\n{tail}\n"));
        }
        out
    }

    /// Brings up munged, slurmctld and slurmd in a fresh temporary directory and waits until
    /// the node is idle.
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        for sub in ["state", "spool", "munge"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let mut cluster = Cluster {
            conf: d.join("slurm.conf"),
            dir,
            daemons: Vec::new(),
            job: None,
        };
        let key = d.join("munge/munge.key");
        let o = Command::new(find("mungekey").unwrap())
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "mungekey: {}", stderr(&o));
        let socket = d.join("munge/munge.socket");
        let arg = |k: &str, p: &Path| format!("--{k}={}", p.display());
        cluster.spawn(
            "munged",
            "munged",
            &[
                "--foreground",
                "--force",
                &arg("socket", &socket),
                &arg("key-file", &key),
                &arg("pid-file", &d.join("munge/munged.pid")),
                &arg("log-file", &d.join("munge/munged.log")),
                &arg("seed-file", &d.join("munge/munged.seed")),
            ],
        );
        cluster.wait_for("the munge socket", |_| socket.exists());

        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().split('.').next().unwrap_or("localhost").to_owned())
            .unwrap_or_else(|_| "localhost".into());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ctld_port, d_port) = (free_port(), free_port());
        let p = |name: &str| d.join(name).display().to_string();
        let conf = format!(
            "ClusterName=dasimtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctld_pid}
SlurmdPidFile={d_pid}
SlurmctldLogFile={ctld_log}
SlurmdLogFile={d_log}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=100 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
",
            socket = socket.display(),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            d_pid = p("slurmd.pid"),
            ctld_log = p("slurmctld.log"),
            d_log = p("slurmd.log"),
        );
        std::fs::write(&cluster.conf, conf).unwrap();
        let conf_arg = cluster.conf.display().to_string();
        cluster.spawn("slurmctld", "slurmctld", &["-D", "-i", "-f", &conf_arg]);
        cluster.spawn("slurmd", "slurmd", &["-D", "-f", &conf_arg, "-N", &host]);
        cluster.wait_for("an idle node", |c| {
            c.client("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        cluster
    }

    fn wait_for(&mut self, what: &str, mut ready: impl FnMut(&Cluster) -> bool) {
        let start = Instant::now();
        while !ready(self) {
            let exited = self
                .daemons
                .iter_mut()
                .find_map(|(name, child)| Some((*name, child.try_wait().ok()??)));
            if let Some((name, status)) = exited {
                panic!(
                    "{name} exited ({status}) while waiting for {what}\n{}",
                    self.logs()
                );
            }
            assert!(
                start.elapsed() < START_TIMEOUT,
                "no {what} after {START_TIMEOUT:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(job) = &self.job {
            let _ = self.client("scancel").arg(job).output();
        }
        // Stop in reverse order of start: slurmd, slurmctld, then munged. TERM lets them clean
        // up; whatever is still running after a few seconds is killed.
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .output();
            let start = Instant::now();
            while !matches!(child.try_wait(), Ok(Some(_))) {
                if start.elapsed() > Duration::from_secs(5) {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_slurm_array_runs_the_sweep_and_merges_like_a_local_one() {
    let required = std::env::var("DASIM_REQUIRE_SLURM").is_ok_and(|v| v == "1");
    if let Some(why) = unavailable() {
        assert!(
            !required,
            "DASIM_REQUIRE_SLURM=1 but Slurm cannot run: {why}"
        );
        eprintln!("SKIPPED the Slurm test: {why}");
        return;
    }
    let started = Instant::now();
    let mut cluster = Cluster::start();
    let up = started.elapsed();

    let work = tempfile::tempdir().unwrap();
    let scenario = work.path().join("sweep.toml");
    std::fs::write(&scenario, format!("{SWEEP_BASE}\n{SWEEP}")).unwrap();
    let out = work.path().join("slurm-out");
    let s = scenario.to_str().unwrap();
    ok(
        &dasim(&[
            "sweep",
            s,
            "--out",
            out.to_str().unwrap(),
            "--backend",
            "flex",
            "--emit-slurm",
            "--cpus-per-task",
            "1",
            "--partition",
            "debug",
            "--time",
            "00:05:00",
        ]),
        "dasim sweep --emit-slurm",
    );
    let script = out.join("sweep.sbatch");
    let submitted = cluster
        .client("sbatch")
        .arg("--parsable")
        .arg(&script)
        .current_dir(work.path())
        .output()
        .unwrap();
    let job = ok(&submitted, "sbatch")
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    cluster.job = Some(job.clone());

    // Wait until no task of the array is pending or running.
    let submitted_at = Instant::now();
    loop {
        let q = cluster
            .client("squeue")
            .args(["-h", "-j", &job, "-o", "%i %T"])
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&q.stdout).trim().to_owned();
        if listed.is_empty() {
            break;
        }
        assert!(
            submitted_at.elapsed() < JOB_TIMEOUT,
            "job {job} still queued after {JOB_TIMEOUT:?}:\n{listed}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let ran = submitted_at.elapsed();

    // Every array task wrote its output, and ran its one point.
    for task in 1..=4 {
        let log = out.join(format!("slurm/{job}_{task}.out"));
        let text = std::fs::read_to_string(&log).unwrap_or_else(|e| {
            panic!(
                "no output of array task {task} ({}): {e}\n{}",
                log.display(),
                cluster.logs()
            )
        });
        assert!(
            text.contains(&format!("(shard {task}/4 of 4 in all): 1 run now")),
            "task {task}:\n{text}"
        );
    }
    let merged = dasim(&["sweep", "merge", out.to_str().unwrap()]);
    assert!(
        ok(&merged, "merge of the Slurm sweep").contains("4 of 4 points complete: 8 rows"),
        "{}",
        String::from_utf8_lossy(&merged.stdout)
    );

    let local = work.path().join("local");
    ok(
        &dasim(&[
            "sweep",
            s,
            "--out",
            local.to_str().unwrap(),
            "--backend",
            "flex",
            "--quiet",
        ]),
        "local sweep",
    );
    ok(
        &dasim(&["sweep", "merge", local.to_str().unwrap()]),
        "merge of the local sweep",
    );
    let read = |d: &Path| std::fs::read_to_string(d.join("sweep.csv")).unwrap();
    assert_eq!(
        read(&out),
        read(&local),
        "the Slurm sweep merged differs from the local one"
    );
    drop(cluster);
    eprintln!(
        "Slurm test: daemons up in {:.1} s, array of 4 tasks done in {:.1} s, {:.1} s in all",
        up.as_secs_f64(),
        ran.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
