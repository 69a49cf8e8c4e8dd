//! Job files that run a sweep on a cluster: a Slurm array script and a Kubernetes indexed Job.
//! Each task of the array (each completion index of the Job) runs one shard of the sweep,
//! `dasim sweep SCENARIO --out DIR --shard I/N`, into the same sweep directory on a shared
//! file system; `dasim sweep merge DIR` gathers the results once they are done.

use std::path::{Path, PathBuf};

use dasim_models::BackendChoice;

/// The Slurm array script written by `--emit-slurm`, in the sweep directory.
pub const SLURM_SCRIPT: &str = "sweep.sbatch";
/// The directory of the array tasks' output files, in the sweep directory.
pub const SLURM_LOGS: &str = "slurm";
/// The Kubernetes manifest written by `--emit-k8s`, in the sweep directory.
pub const K8S_MANIFEST: &str = "sweep-job.yaml";

/// What a job file runs: the same sweep, one shard per task.
#[derive(Clone, Debug)]
pub struct EmitSpec {
    /// The `dasim` executable (Slurm: this one, by its absolute path; Kubernetes: the image's
    /// `dasim`).
    pub exe: PathBuf,
    /// The scenario file.
    pub scenario: PathBuf,
    /// The sweep directory.
    pub out: PathBuf,
    /// A name for the job (the scenario's file stem).
    pub name: String,
    /// Points of the sweep.
    pub points: usize,
    /// Shards (array tasks); at most `points`.
    pub shards: usize,
    /// Points a task runs at once.
    pub jobs: usize,
    /// Threads of each point's run.
    pub threads: usize,
    /// `--backend` of each run.
    pub backend: BackendChoice,
}

/// The resources and limits of `--emit-slurm` and `--emit-k8s`.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    /// Slurm partition.
    pub partition: Option<String>,
    /// Slurm time limit per task (`HH:MM:SS`, `D-HH:MM:SS` or minutes).
    pub time: Option<String>,
    /// CPUs per task (default: jobs × threads).
    pub cpus_per_task: Option<usize>,
    /// GPUs per task (none by default).
    pub gpus_per_task: Option<usize>,
    /// Tasks running at once (default: no limit).
    pub array_parallelism: Option<usize>,
    /// Kubernetes: the container image (default `dasim:latest`).
    pub image: Option<String>,
    /// Kubernetes: the persistent volume claim holding the scenario and the sweep directory
    /// (default `dasim-sweep`).
    pub pvc: Option<String>,
    /// Kubernetes: where the volume is mounted and the working directory (default `/sweep`).
    pub mount: Option<String>,
}

/// `s` quoted for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `s` as a double-quoted YAML string.
fn yaml_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A name Kubernetes and Slurm accept: lower-case letters, digits and `-`, at most 63
/// characters, starting and ending with a letter or digit.
pub fn job_name(stem: &str) -> String {
    let mut name: String = format!("dasim-{stem}")
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(63);
    name.trim_matches('-').to_owned()
}

/// The shard command of one task, `shard` being the shell expression of its `I`.
fn shard_command(spec: &EmitSpec, exe: &str, scenario: &Path, out: &Path, shard: &str) -> String {
    format!(
        "{exe} sweep {} --out {} --shard \"{shard}/{}\" --jobs {} --threads {} --backend {}",
        shell_quote(&scenario.to_string_lossy()),
        shell_quote(&out.to_string_lossy()),
        spec.shards,
        spec.jobs,
        spec.threads,
        shell_quote(&spec.backend.to_string()),
    )
}

/// The `sbatch` array script: task `$SLURM_ARRAY_TASK_ID` (1 to N) runs shard `I/N`. Paths
/// are as given in `spec` (make them absolute: the tasks run on other nodes, from the
/// directory `sbatch` was called in).
pub fn slurm_script(spec: &EmitSpec, res: &Resources) -> String {
    let out = &spec.out;
    let mut s = String::new();
    s.push_str("#!/bin/bash\n");
    s.push_str(&format!(
        "# The sweep of {}: {} points in {} array tasks, written by `dasim sweep --emit-slurm`.\n",
        spec.scenario.display(),
        spec.points,
        spec.shards
    ));
    s.push_str(&format!(
        "#   submit: sbatch {}\n",
        shell_quote(&out.join(SLURM_SCRIPT).to_string_lossy())
    ));
    s.push_str("#   watch:  squeue --me; sacct -j JOBID --format=JobID,State,Elapsed,ExitCode\n");
    s.push_str(&format!(
        "#   merge:  dasim sweep merge {}\n",
        shell_quote(&out.to_string_lossy())
    ));
    s.push_str(
        "# A task that fails or is cancelled can be run again: finished points are skipped.\n",
    );
    s.push_str(&format!("#SBATCH --job-name={}\n", job_name(&spec.name)));
    let limit = res
        .array_parallelism
        .map(|k| format!("%{k}"))
        .unwrap_or_default();
    s.push_str(&format!("#SBATCH --array=1-{}{limit}\n", spec.shards));
    s.push_str("#SBATCH --ntasks=1\n");
    s.push_str(&format!(
        "#SBATCH --cpus-per-task={}\n",
        res.cpus_per_task.unwrap_or(spec.jobs * spec.threads)
    ));
    if let Some(g) = res.gpus_per_task.filter(|&g| g > 0) {
        s.push_str(&format!("#SBATCH --gpus-per-task={g}\n"));
    }
    if let Some(p) = &res.partition {
        s.push_str(&format!("#SBATCH --partition={p}\n"));
    }
    if let Some(t) = &res.time {
        s.push_str(&format!("#SBATCH --time={t}\n"));
    }
    s.push_str(&format!(
        "#SBATCH --output={}/%A_%a.out\n",
        out.join(SLURM_LOGS).display()
    ));
    s.push_str("set -euo pipefail\n");
    s.push_str(&format!(
        "exec {}\n",
        shard_command(
            spec,
            &shell_quote(&spec.exe.to_string_lossy()),
            &spec.scenario,
            out,
            "${SLURM_ARRAY_TASK_ID}"
        )
    ));
    s
}

/// The Kubernetes indexed Job: completion index `$JOB_COMPLETION_INDEX` (0 to N−1) runs shard
/// `index + 1` of N, with the image's `dasim`, in the mounted volume that holds the scenario
/// and the sweep directory (paths as given in `spec`, relative to the mount).
pub fn k8s_manifest(spec: &EmitSpec, res: &Resources) -> String {
    let name = job_name(&spec.name);
    let mount = res.mount.clone().unwrap_or_else(|| "/sweep".into());
    let image = res.image.clone().unwrap_or_else(|| "dasim:latest".into());
    let pvc = res.pvc.clone().unwrap_or_else(|| "dasim-sweep".into());
    let cpus = res.cpus_per_task.unwrap_or(spec.jobs * spec.threads);
    let command = format!(
        "exec {}",
        shard_command(
            spec,
            "dasim",
            &spec.scenario,
            &spec.out,
            "$((JOB_COMPLETION_INDEX + 1))"
        )
    );
    let mut y = String::new();
    y.push_str(&format!(
        "# The sweep of {}: {} points in {} indexed completions, written by `dasim sweep --emit-k8s`.\n",
        spec.scenario.display(),
        spec.points,
        spec.shards
    ));
    y.push_str(&format!(
        "#   submit: kubectl apply -f {}\n",
        shell_quote(&spec.out.join(K8S_MANIFEST).to_string_lossy())
    ));
    y.push_str(&format!(
        "#   watch:  kubectl get job {name} --watch; kubectl logs --prefix -l job-name={name}\n"
    ));
    y.push_str(&format!(
        "#   merge:  dasim sweep merge {}   (in the volume, once the job is complete)\n",
        shell_quote(&spec.out.to_string_lossy())
    ));
    y.push_str("apiVersion: batch/v1\nkind: Job\nmetadata:\n");
    y.push_str(&format!("  name: {name}\n"));
    y.push_str("spec:\n  completionMode: Indexed\n");
    y.push_str(&format!("  completions: {}\n", spec.shards));
    y.push_str(&format!(
        "  parallelism: {}\n",
        res.array_parallelism.unwrap_or(spec.shards)
    ));
    y.push_str("  backoffLimitPerIndex: 1\n");
    y.push_str(&format!("  maxFailedIndexes: {}\n", spec.shards));
    y.push_str("  template:\n    spec:\n      restartPolicy: Never\n      containers:\n");
    y.push_str("        - name: dasim\n");
    y.push_str(&format!("          image: {}\n", yaml_quote(&image)));
    y.push_str(&format!("          workingDir: {}\n", yaml_quote(&mount)));
    y.push_str("          command: [\"/bin/sh\", \"-c\"]\n");
    y.push_str(&format!("          args: [{}]\n", yaml_quote(&command)));
    y.push_str("          resources:\n");
    y.push_str(&format!("            requests: {{cpu: \"{cpus}\"}}\n"));
    match res.gpus_per_task.filter(|&g| g > 0) {
        Some(g) => y.push_str(&format!(
            "            limits: {{cpu: \"{cpus}\", nvidia.com/gpu: {g}}}\n"
        )),
        None => y.push_str(&format!("            limits: {{cpu: \"{cpus}\"}}\n")),
    }
    y.push_str("          volumeMounts:\n");
    y.push_str(&format!(
        "            - {{name: sweep, mountPath: {}}}\n",
        yaml_quote(&mount)
    ));
    y.push_str("      volumes:\n");
    y.push_str(&format!(
        "        - {{name: sweep, persistentVolumeClaim: {{claimName: {}}}}}\n",
        yaml_quote(&pvc)
    ));
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EmitSpec {
        EmitSpec {
            exe: "/opt/dasim/bin/dasim".into(),
            scenario: "/data/my sweep.toml".into(),
            out: "/data/out".into(),
            name: "My_Sweep".into(),
            points: 12,
            shards: 12,
            jobs: 1,
            threads: 4,
            backend: BackendChoice::Flex,
        }
    }

    #[test]
    fn the_slurm_script_runs_the_task_s_shard() {
        let res = Resources {
            partition: Some("gpu".into()),
            time: Some("01:00:00".into()),
            gpus_per_task: Some(1),
            array_parallelism: Some(4),
            ..Resources::default()
        };
        let s = slurm_script(&spec(), &res);
        assert!(s.starts_with("#!/bin/bash\n"), "{s}");
        for line in [
            "#SBATCH --array=1-12%4",
            "#SBATCH --cpus-per-task=4",
            "#SBATCH --gpus-per-task=1",
            "#SBATCH --partition=gpu",
            "#SBATCH --time=01:00:00",
            "#SBATCH --job-name=dasim-my-sweep",
            "#SBATCH --output=/data/out/slurm/%A_%a.out",
            "exec /opt/dasim/bin/dasim sweep '/data/my sweep.toml' --out /data/out --shard \"${SLURM_ARRAY_TASK_ID}/12\" --jobs 1 --threads 4 --backend flex",
        ] {
            assert!(s.lines().any(|l| l == line), "missing `{line}` in\n{s}");
        }
    }

    #[test]
    fn the_k8s_job_is_indexed() {
        let y = k8s_manifest(&spec(), &Resources::default());
        for line in [
            "kind: Job",
            "  completionMode: Indexed",
            "  completions: 12",
            "  parallelism: 12",
            "          image: \"dasim:latest\"",
            "          args: [\"exec dasim sweep '/data/my sweep.toml' --out /data/out --shard \\\"$((JOB_COMPLETION_INDEX + 1))/12\\\" --jobs 1 --threads 4 --backend flex\"]",
        ] {
            assert!(y.lines().any(|l| l == line), "missing `{line}` in\n{y}");
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a/b-c.toml"), "a/b-c.toml");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(job_name("--Quick Start--"), "dasim---quick-start");
    }
}
