//! Parameter sweeps (`[sweep]`, `dasim sweep`, `dasim sweep merge`, the emitted job files).
//!
//! Every scenario here trains the quadratic (no data to read) on 4 workers for 0.2 simulated
//! seconds, so a point runs in a fraction of a second and every test in seconds.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::{SWEEP_BASE as BASE, dasim, scenario, stderr};
use dasim::sweep::{Shard, Sweep};

/// `BASE` with `sweep` as its `[sweep]` table.
fn with_sweep(sweep: &str) -> String {
    format!("{BASE}\n[sweep]\n{sweep}")
}

/// Runs `dasim sweep` on flex with `args` after the scenario and `--out`.
fn sweep_cmd(scenario: &Path, out: &Path, args: &[&str]) -> Output {
    let mut all = vec![
        "sweep",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "flex",
    ];
    all.extend_from_slice(args);
    dasim(&all)
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        stderr(o)
    );
}

fn merge(dir: &Path) -> Output {
    dasim(&["sweep", "merge", dir.to_str().unwrap()])
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.as_ref().display()))
}

/// The names of the points whose `point.json` says done.
fn done_points(out: &Path) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(out.join("points")) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("point.json"))
                .is_ok_and(|t| t.contains("\"state\": \"done\""))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

#[test]
fn expansion_gives_the_product_with_zipped_keys_names_and_values() {
    let text = format!(
        "{}\n[sweep]\n{}",
        BASE.replace("kind = \"adpsgd\"", "kind = \"overlap-sgp\""),
        r#""cluster.stragglers[0].factor" = [1, 2, 4]
seed = "1..=2"
"algorithms[1].tau" = [0, 3]
zip = [["cluster.workers", "run.sim_time_s"]]
"cluster.workers" = [4, 8]
run.sim_time_s = [0.1, 0.25]
"#
    );
    let sweep = Sweep::parse(Path::new("/tmp/s.toml"), &text)
        .unwrap()
        .expect("a [sweep] table");
    let keys: Vec<&str> = sweep.axes.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "cluster.stragglers[0].factor",
            "seed",
            "algorithms[1].tau",
            "cluster.workers",
            "run.sim_time_s"
        ]
    );
    assert_eq!(sweep.len(), 3 * 2 * 2 * 2);
    let points = sweep.load_all().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(points.len(), 24);
    let names: Vec<&str> = points.iter().map(|(p, _)| p.name.as_str()).collect();
    assert_eq!(names[0], "factor=1,seed=1,tau=0,workers=4,sim_time_s=0.1");
    // The last key (group) varies fastest; zipped keys move together.
    assert_eq!(names[1], "factor=1,seed=1,tau=0,workers=8,sim_time_s=0.25");
    assert_eq!(names[2], "factor=1,seed=1,tau=3,workers=4,sim_time_s=0.1");
    assert_eq!(names[23], "factor=4,seed=2,tau=3,workers=8,sim_time_s=0.25");
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), 24, "names are unique");
    // Names are stable: the same file expands to the same names.
    let again: Vec<String> = Sweep::parse(Path::new("/tmp/s.toml"), &text)
        .unwrap()
        .unwrap()
        .points()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(again, names);

    for (i, (point, loaded)) in points.iter().enumerate() {
        let s = &loaded.scenario;
        let factor = [1.0, 2.0, 4.0][i / 8];
        let seed = [1, 2][i / 4 % 2];
        let tau = [0, 3][i / 2 % 2];
        let (workers, sim) = [(4, 0.1), (8, 0.25)][i % 2];
        assert_eq!(s.seed, seed, "{}", point.name);
        assert_eq!(s.cluster.workers, workers, "{}", point.name);
        assert_eq!(s.run.sim_time_s, Some(sim), "{}", point.name);
        assert_eq!(
            s.own_quantity("tau"),
            [("overlap-sgp".to_string(), tau as f64)]
        );
        // The point's text: the file without [sweep], the factor written as a float.
        let doc: toml::Table = point.text.parse().unwrap();
        assert!(!doc.contains_key("sweep"));
        assert_eq!(
            doc["cluster"]["stragglers"][0]["factor"].as_float(),
            Some(factor),
            "{}",
            point.name
        );
        assert_eq!(
            doc["cluster"]["stragglers"][0]["workers"][0].as_integer(),
            Some(1)
        );
        // Everything not swept is as in the file.
        assert_eq!(s.name.as_deref(), Some("tiny"));
        assert_eq!(s.expect.len(), 1);
        assert_eq!(
            point
                .values
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>(),
            keys
        );
    }

    // A file without [sweep] has none; one whose [sweep] sweeps nothing is an error.
    assert!(Sweep::parse(Path::new("s.toml"), BASE).unwrap().is_none());
    let e = Sweep::parse(Path::new("s.toml"), &with_sweep("")).unwrap_err();
    assert!(e.message.contains("sweeps no key"), "{e}");
}

#[test]
fn shards_are_a_partition_of_the_points() {
    for n in 1..=5 {
        for i in 0..20 {
            let owners: Vec<usize> = (1..=n)
                .filter(|&k| Shard { index: k, count: n }.holds(i))
                .collect();
            assert_eq!(owners.len(), 1, "point {i} of {n} shards: {owners:?}");
        }
    }
    assert_eq!("2/3".parse::<Shard>(), Ok(Shard { index: 2, count: 3 }));
    for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
}

/// Writes `sweep` into a scenario, runs `dasim sweep` on it and expects a located error
/// naming `point`, at `line:column`, with nothing written.
fn refused(sweep: &str, point: &str, line: usize, column: usize, says: &str) {
    let text = with_sweep(sweep);
    let (dir, path) = scenario(&text, "bad.toml");
    let out = dir.path().join("out");
    let o = sweep_cmd(&path, &out, &["--quiet"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{sweep}: {err}");
    let at = format!("bad.toml:{line}:{column}: ");
    assert!(err.contains(&at), "{sweep}: expected {at} in\n{err}");
    assert!(
        err.contains(&format!("sweep point `{point}`")),
        "{sweep}: expected the point `{point}` in\n{err}"
    );
    assert!(err.contains(says), "{sweep}: expected `{says}` in\n{err}");
    assert!(!out.exists(), "nothing is written before the points load");
    // `dasim validate` says the same.
    let v = dasim(&["validate", path.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(2));
    assert!(stderr(&v).contains(&at), "{}", stderr(&v));
}

#[test]
fn bad_points_fail_before_any_run_located_and_named() {
    let line = BASE.lines().count() + 3; // the [sweep] table's first key
    // An unknown key path: at the key.
    refused(
        "\"cluster.wrokers\" = [4, 8]\n",
        "wrokers=4",
        line,
        1,
        "unknown field `wrokers`",
    );
    // A key of another algorithm kind: at the key.
    refused(
        "seed = [1]\n\"algorithms[0].tau\" = [1]\n",
        "seed=1,tau=1",
        line + 1,
        1,
        "unknown field `tau`",
    );
    // A value of the wrong type: at the value.
    refused(
        "\"cluster.workers\" = [4, \"eight\"]\n",
        "workers=eight",
        line,
        25,
        "invalid type: string \"eight\"",
    );
    // A value that fails validation: at that value, not at the first.
    refused(
        "seed = \"1..=2\"\n\"cluster.stragglers[0].factor\" = [2.0, -1.0]\n",
        "seed=1,factor=-1",
        line + 1,
        40,
        "factor",
    );
    // An entry past the end of a list.
    refused(
        "\"cluster.stragglers[2].factor\" = [2.0]\n",
        "factor=2",
        line,
        1,
        "has 1 entry",
    );
}

#[test]
fn a_scenario_with_a_sweep_is_not_a_run() {
    let (dir, path) = scenario(&with_sweep("seed = [1, 2]\n"), "s.toml");
    let o = common::dasim_run_flex(&path, &dir.path().join("out"), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("dasim sweep SCENARIO --out DIR"),
        "{}",
        stderr(&o)
    );
    let v = dasim(&["validate", path.to_str().unwrap()]);
    ok(&v, "validate");
    assert!(
        String::from_utf8_lossy(&v.stdout).contains("a sweep of 2 points over seed"),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
}

const GRID: &str = "\"cluster.stragglers[0].factor\" = [1, 4]\nseed = \"1..=3\"\n";

#[test]
fn two_jobs_merge_to_the_same_results_as_one_and_plots_are_drawn() {
    let (dir, path) = scenario(&with_sweep(GRID), "grid.toml");
    let one = dir.path().join("one");
    let two = dir.path().join("two");
    ok(&sweep_cmd(&path, &one, &["--jobs", "1"]), "sweep --jobs 1");
    ok(&sweep_cmd(&path, &two, &["--jobs", "2"]), "sweep --jobs 2");
    for d in [&one, &two] {
        let m = merge(d);
        ok(&m, "merge");
        assert!(
            String::from_utf8_lossy(&m.stdout).contains("6 of 6 points complete: 12 rows"),
            "{}",
            String::from_utf8_lossy(&m.stdout)
        );
    }
    let a = read(one.join("sweep.csv"));
    assert_eq!(a, read(two.join("sweep.csv")), "--jobs 2 merged differs");

    let mut rows = csv::Reader::from_reader(a.as_bytes());
    let header: Vec<String> = rows.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        &header[..6],
        [
            "point",
            "cluster.stragglers[0].factor",
            "seed",
            "algorithm",
            "kind",
            "status"
        ]
    );
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = rows.records().map(|r| r.unwrap()).collect();
    assert_eq!(rows.len(), 12);
    for r in &rows {
        assert_eq!(&r[col("status")], "done");
        // The claim holds for all-reduce; it names no other algorithm.
        if &r[col("algorithm")] == "allreduce" {
            assert_eq!(&r[col("expect0")], "pass");
            assert_eq!(&r[col("checks_passed")], "1");
        } else {
            assert_eq!(&r[col("expect0")], "");
        }
    }
    // A 4x straggler slows all-reduce's epochs: every worker waits for it.
    let per_epoch = |factor: &str| -> f64 {
        rows.iter()
            .find(|r| {
                &r[col("algorithm")] == "allreduce"
                    && &r[col("cluster.stragglers[0].factor")] == factor
            })
            .unwrap()[col("time_per_epoch_s")]
        .parse()
        .unwrap()
    };
    assert!(per_epoch("4") > 3.0 * per_epoch("1"));

    for metric in ["time_per_epoch_s", "final_loss", "steps_per_sim_s"] {
        for ext in ["png", "svg"] {
            let p = one.join(format!("plots/{metric}-vs-factor.{ext}"));
            assert!(p.is_file(), "missing {}", p.display());
        }
    }
    let svg = read(one.join("plots/final_loss-vs-factor.svg"));
    assert!(svg.contains("mean over 3 seeds"), "the band's note");
    // A chosen metric against a chosen key; an unknown one is refused.
    let m = dasim(&[
        "sweep",
        "merge",
        one.to_str().unwrap(),
        "--metric",
        "global_staleness_mean",
        "--x",
        "cluster.stragglers[0].factor",
    ]);
    ok(&m, "merge --metric");
    assert!(
        one.join("plots/global_staleness_mean-vs-factor.png")
            .is_file()
    );
    let m = dasim(&["sweep", "merge", one.to_str().unwrap(), "--metric", "speed"]);
    assert_eq!(m.status.code(), Some(2), "{}", stderr(&m));
}

#[test]
fn shards_together_run_every_point_exactly_once() {
    let (dir, path) = scenario(&with_sweep(GRID), "grid.toml");
    let out = dir.path().join("out");
    let mut seen: Vec<String> = Vec::new();
    for i in 1..=3 {
        let shard = format!("{i}/3");
        let o = sweep_cmd(&path, &out, &["--shard", &shard, "--jobs", "2"]);
        ok(&o, &shard);
        let ran: Vec<String> = stderr(&o)
            .lines()
            .filter_map(|l| l.strip_prefix("done   "))
            .map(|l| l.split(' ').next().unwrap().to_owned())
            .collect();
        assert_eq!(
            ran.len(),
            2,
            "shard {shard} runs 2 of 6 points:\n{}",
            stderr(&o)
        );
        seen.extend(ran);
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), 6, "each point once: {seen:?}");
    assert_eq!(done_points(&out).len(), 6);
    // Merged, the shards give what one local sweep gives.
    let local = dir.path().join("local");
    ok(&sweep_cmd(&path, &local, &[]), "local sweep");
    ok(&merge(&out), "merge shards");
    ok(&merge(&local), "merge local");
    assert_eq!(read(out.join("sweep.csv")), read(local.join("sweep.csv")));
    // Run again, a shard finds its points complete.
    let o = sweep_cmd(&path, &out, &["--shard", "2/3"]);
    ok(&o, "shard again");
    assert!(
        stderr(&o).contains("2 complete already, 0 to run"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_killed_sweep_resumes_without_redoing_finished_points() {
    let sweep = "seed = \"1..=6\"\n";
    let (dir, path) = scenario(&with_sweep(sweep), "resume.toml");
    let out = dir.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dasim"))
        .args([
            "sweep",
            path.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(["--backend", "flex", "--jobs", "1", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while done_points(&out).is_empty() {
        assert!(Instant::now() < deadline, "no point completed in 60 s");
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended early");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let finished = done_points(&out);
    assert!(
        !finished.is_empty() && finished.len() < 6,
        "killed after 1 to 5 points: {finished:?}"
    );
    let stamps: Vec<(PathBuf, SystemTime)> = finished
        .iter()
        .flat_map(|p| {
            let d = out.join("points").join(p);
            [
                d.join("summary.json"),
                d.join("metrics.csv"),
                d.join("point.json"),
            ]
        })
        .map(|f| {
            let t = mtime(&f);
            (f, t)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));

    let o = sweep_cmd(&path, &out, &["--jobs", "1"]);
    ok(&o, "the resumed sweep");
    let err = stderr(&o);
    // Points that completed after the first count was taken are skipped too.
    let skipped: usize = err
        .split(" complete already")
        .next()
        .and_then(|s| s.rsplit(", ").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of complete points in\n{err}"));
    assert!(skipped >= finished.len(), "{err}");
    let ran = err.lines().filter(|l| l.starts_with("done   ")).count();
    assert_eq!(ran + skipped, 6, "{err}");
    for p in &finished {
        assert!(
            !err.contains(&format!("done   {p} ")),
            "{p} was run again:\n{err}"
        );
    }
    for (f, t) in stamps {
        assert_eq!(mtime(&f), t, "{} was rewritten", f.display());
    }
    assert_eq!(done_points(&out).len(), 6);
}

#[test]
fn merge_writes_a_page_whose_table_sorts_by_any_column() {
    let (dir, path) = scenario(&with_sweep(GRID), "grid.toml");
    let out = dir.path().join("out");
    ok(&sweep_cmd(&path, &out, &[]), "sweep");
    let m = merge(&out);
    ok(&m, "merge");
    assert!(
        String::from_utf8_lossy(&m.stdout).contains(&format!(
            "the page in {}",
            out.join("report.html").display()
        )),
        "{}",
        String::from_utf8_lossy(&m.stdout)
    );
    let html = read(out.join("report.html"));
    let body = &html[html.find("<tbody>").unwrap()..html.find("</tbody>").unwrap()];
    assert_eq!(
        body.matches("<tr>").count(),
        12,
        "a row per point and algorithm"
    );
    assert!(
        html.contains(
            "<th class=\"key\" data-type=\"number\" tabindex=\"0\">cluster.stragglers[0].factor</th>"
        ),
        "the swept keys are columns"
    );
    assert!(
        html.contains("The same on every row: status done"),
        "said once"
    );
    for metric in ["time_per_epoch_s", "final_loss", "steps_per_sim_s"] {
        assert!(
            html.contains(&format!("data-figure=\"{metric}-vs-factor\"")),
            "{metric}: the sweep's plots, as charts"
        );
    }
    let Some(chromium) = crate::report::chromium() else {
        return;
    };
    // Sorting by time per epoch: ascending, then descending on a second click; every plot drawn.
    let script = r#"
      var heads = Array.prototype.slice.call(document.querySelectorAll('table.points thead th'));
      var col = heads.findIndex(function (h) { return h.textContent === 'time_per_epoch_s'; });
      var values = function () {
        return Array.prototype.map.call(document.querySelectorAll('table.points tbody tr'), function (r) {
          var c = r.cells[col]; return parseFloat(c.dataset.v || c.textContent);
        });
      };
      var sorted = function (v, dir) { return v.every(function (x, i) { return i === 0 || dir * (x - v[i - 1]) >= 0; }); };
      heads[col].click();
      var up = sorted(values(), 1);
      heads[col].click();
      var down = sorted(values(), -1);
      document.body.setAttribute('data-sort', (up ? 'ascending' : 'unsorted') + '/' + (down ? 'descending' : 'unsorted') + '/' + values().length);
      document.body.setAttribute('data-drawn', String(document.querySelectorAll('figure .chart.drawn').length));
    "#;
    let dom = crate::report::probe(
        &chromium,
        &dir.path().join("profile"),
        &html,
        script,
        "1280,900",
    );
    assert_eq!(
        crate::report::attribute(&dom, "data-sort"),
        "ascending/descending/12"
    );
    assert_eq!(crate::report::attribute(&dom, "data-drawn"), "3");
}

#[test]
fn merge_lists_a_failed_point_and_writes_the_others() {
    // A trace file that does not exist passes validation (it is read when the run is built),
    // so that point fails while running.
    let text = BASE.replace(
        "[topology]",
        "[[cluster.stragglers]]\nkind = \"trace\"\nworkers = [0]\nfile = \"steps.csv\"\n\n[topology]",
    );
    let text = format!(
        "{text}\n[sweep]\n\"cluster.stragglers[1].file\" = [\"steps.csv\", \"missing.csv\"]\nseed = [1, 2]\n"
    );
    let (dir, path) = scenario(&text, "fails.toml");
    std::fs::write(dir.path().join("steps.csv"), "duration_ms\n10\n12\n").unwrap();
    let out = dir.path().join("out");
    let o = sweep_cmd(&path, &out, &["--jobs", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("2 of 4 points failed"), "{err}");
    assert!(err.contains("FAILED file=missing.csv,seed=1"), "{err}");
    let status = read(out.join("points/file=missing.csv,seed=2/point.json"));
    assert!(status.contains("\"state\": \"failed\""), "{status}");
    assert!(status.contains("missing.csv"), "{status}");
    // The error is located in the sweep's file and names the point.
    assert!(status.contains("fails.toml:"), "{status}");
    assert!(
        status.contains("sweep point `file=missing.csv,seed=2`"),
        "{status}"
    );

    let m = merge(&out);
    assert_eq!(m.status.code(), Some(1), "{}", stderr(&m));
    let listed = stderr(&m);
    assert!(
        listed.contains("failed     file=missing.csv,seed=1"),
        "{listed}"
    );
    assert!(listed.contains("2 of 4 points have no results"), "{listed}");
    let csv_text = read(out.join("sweep.csv"));
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    // 2 points × 2 algorithms with results, and one row for each failed point.
    assert_eq!(rows.len(), 6, "{csv_text}");
    let failed: Vec<&csv::StringRecord> = rows
        .iter()
        .filter(|r| &r[col("status")] == "failed")
        .collect();
    assert_eq!(failed.len(), 2);
    for r in failed {
        assert_eq!(&r[col("cluster.stragglers[1].file")], "missing.csv");
        assert!(r[col("error")].contains("missing.csv"));
        assert_eq!(&r[col("final_loss")], "");
    }
    let done = rows.iter().filter(|r| &r[col("status")] == "done").count();
    assert_eq!(done, 4);
    assert!(out.join("plots").is_dir() || !out.join("plots").exists());

    // A point never started is listed as not run.
    std::fs::remove_dir_all(out.join("points/file=steps.csv,seed=2")).unwrap();
    let m = merge(&out);
    assert!(
        stderr(&m).contains("not-run    file=steps.csv,seed=2"),
        "{}",
        stderr(&m)
    );
}

/// The shard command of a job file, run for every task index as the scheduler would: the
/// merged results equal a local sweep's.
#[test]
fn the_emitted_job_files_run_every_shard() {
    let (dir, path) = scenario(&with_sweep(GRID), "grid.toml");
    let local = dir.path().join("local");
    ok(&sweep_cmd(&path, &local, &["--quiet"]), "local sweep");
    ok(&merge(&local), "merge local");
    let expected = read(local.join("sweep.csv"));

    // Slurm: the script, run by bash with each $SLURM_ARRAY_TASK_ID.
    let out = dir.path().join("slurm");
    let o = sweep_cmd(
        &path,
        &out,
        &[
            "--emit-slurm",
            "--shards",
            "4",
            "--array-parallelism",
            "2",
            "--time",
            "00:10:00",
        ],
    );
    ok(&o, "--emit-slurm");
    let script = out.join("sweep.sbatch");
    let text = read(&script);
    assert!(text.contains("#SBATCH --array=1-4%2\n"), "{text}");
    assert!(text.contains("#SBATCH --time=00:10:00\n"), "{text}");
    assert!(
        out.join("slurm").is_dir(),
        "the output directory of the tasks exists"
    );
    assert!(out.join("sweep.json").is_file());
    for task in 1..=4 {
        let o = Command::new("bash")
            .arg(&script)
            .env("SLURM_ARRAY_TASK_ID", task.to_string())
            .output()
            .unwrap();
        ok(&o, &format!("array task {task}"));
    }
    ok(&merge(&out), "merge slurm");
    assert_eq!(read(out.join("sweep.csv")), expected);

    // Kubernetes: the container's command, run by sh with each $JOB_COMPLETION_INDEX, in the
    // working directory that holds the scenario, with `dasim` on the PATH.
    let rel_out = "k8s";
    let o = Command::new(env!("CARGO_BIN_EXE_dasim"))
        .current_dir(dir.path())
        .args(["sweep", "grid.toml", "--out", rel_out, "--backend", "flex"])
        .args([
            "--emit-k8s",
            "--shards",
            "3",
            "--image",
            "registry.example/dasim:1",
        ])
        .output()
        .unwrap();
    ok(&o, "--emit-k8s");
    let yaml = read(dir.path().join(rel_out).join("sweep-job.yaml"));
    assert!(yaml.contains("  completionMode: Indexed\n"), "{yaml}");
    assert!(yaml.contains("  completions: 3\n"), "{yaml}");
    assert!(
        yaml.contains("image: \"registry.example/dasim:1\""),
        "{yaml}"
    );
    let args = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("args: [\""))
        .and_then(|l| l.strip_suffix("\"]"))
        .expect("an args line")
        .replace("\\\"", "\"");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_dasim")).parent().unwrap();
    let path_var = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for index in 0..3 {
        let o = Command::new("sh")
            .args(["-c", &args])
            .current_dir(dir.path())
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("PATH", &path_var)
            .output()
            .unwrap();
        ok(&o, &format!("completion index {index}"));
    }
    let k8s = dir.path().join(rel_out);
    ok(&merge(&k8s), "merge k8s");
    assert_eq!(read(k8s.join("sweep.csv")), expected);
}

/// Runs that diverged have no result to average: `merge` keeps them in `sweep.csv`, marked,
/// and leaves them out of the plots, saying so in every plot and on the terminal.
#[test]
fn merge_leaves_runs_that_stopped_early_out_of_the_plots() {
    let (dir, path) = scenario(
        &with_sweep("\"optimizer.lr\" = [0.05, 0.1, 1000.0]\n"),
        "lr.toml",
    );
    let out = dir.path().join("out");
    ok(&sweep_cmd(&path, &out, &["--jobs", "2"]), "sweep");
    let m = merge(&out);
    ok(&m, "merge");
    let err = stderr(&m);
    assert!(
        err.contains("2 run(s) left out of the plots, stopped early"),
        "{err}"
    );
    assert!(err.contains("diverged   lr=1000 (allreduce)"), "{err}");
    let csv_text = read(out.join("sweep.csv"));
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    for r in reader.records().map(|r| r.unwrap()) {
        let diverged = &r[col("optimizer.lr")] == "1000.0";
        assert_eq!(&r[col("status")], "done");
        assert_eq!(&r[col("stopped")] == "diverged", diverged, "{r:?}");
        assert_eq!(&r[col("backend")], "flex");
        assert_eq!(&r[col("dasim_version")], env!("CARGO_PKG_VERSION"));
    }
    // The plot against the rate has the two rates that trained, and says what it left out.
    let svg = read(out.join("plots/final_loss-vs-lr.svg"));
    assert!(
        svg.contains("left out: 2 runs that stopped early"),
        "the plot's note"
    );
}

/// A point is reused only when this build of dasim ran it with this `--backend`; `merge` says
/// when the points' builds or backends differ.
#[test]
fn points_run_by_another_build_or_backend_are_run_again() {
    let (dir, path) = scenario(&with_sweep("seed = [1, 2]\n"), "prov.toml");
    let out = dir.path().join("out");
    ok(&sweep_cmd(&path, &out, &[]), "sweep");
    let status = out.join("points/seed=1/point.json");
    let text = read(&status);
    assert!(
        text.contains(&format!(
            "\"dasim_version\": \"{}\"",
            env!("CARGO_PKG_VERSION")
        )) && text.contains("\"backend\": \"flex\""),
        "{text}"
    );
    // As if an older dasim had run seed=1: it runs again, seed=2 does not.
    let old = text.replace(
        &format!("\"dasim_version\": \"{}\"", env!("CARGO_PKG_VERSION")),
        "\"dasim_version\": \"0.0.1\"",
    );
    std::fs::write(&status, old).unwrap();
    let o = sweep_cmd(&path, &out, &[]);
    ok(&o, "sweep again");
    let err = stderr(&o);
    assert!(
        err.contains("rerun  seed=1 (ran by dasim 0.0.1 (git "),
        "{err}"
    );
    assert!(err.contains("done   seed=1 "), "{err}");
    assert!(!err.contains("seed=2"), "{err}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1 complete already"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Another --backend runs every point again.
    let o = dasim(&[
        "sweep",
        path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "auto",
    ]);
    ok(&o, "sweep --backend auto");
    assert!(
        stderr(&o).contains("2 points complete by another build or backend"),
        "{}",
        stderr(&o)
    );
    // As if seed=2 had run on a GPU: merge says the results are mixed, in the plots too.
    let summary = out.join("points/seed=2/summary.json");
    let text = read(&summary);
    std::fs::write(
        &summary,
        text.replace("\"backend\": \"flex\"", "\"backend\": \"wgpu\""),
    )
    .unwrap();
    let m = merge(&out);
    ok(&m, "merge");
    let err = stderr(&m);
    assert!(
        err.contains("warning: the points ran by different builds"),
        "{err}"
    );
    assert!(err.contains(") on wgpu: 1 point"), "{err}");
}
