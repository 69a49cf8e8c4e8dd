//! `dasim import alibaba-pai`: a file in the format of Alibaba PAI's
//! `cluster-trace-gpu-v2020/mini-batch-time/data/job_*_norm.csv`, generated here (dasim ships
//! none of the trace), becomes a per-worker step-time trace that a scenario runs on: the
//! normalization, the samples held or interpolated between iterations, and the errors.

use crate::common;

use common::*;

/// Two workers sampled at iterations 1, 11 and 21, worker 1 turning into a straggler in the
/// middle (as job 1's worker 6 does); the mean of the six values is 500.
const PAI: &str = ",worker,gpu,time,batch_time_norm
0,0,25,1,400
1,1,25,1,400
2,0,25,11,400
3,1,25,11,800
4,0,25,21,400
5,1,25,21,600
";

/// Runs `dasim import alibaba-pai FILE --out OUT` with `extra` flags.
fn import(file: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let (file, out) = (file.display().to_string(), out.display().to_string());
    let mut args = vec!["import", "alibaba-pai", &file, "--out", &out];
    args.extend_from_slice(extra);
    dasim(&args)
}

fn rows(text: &str) -> Vec<(usize, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("worker"))
        .map(|l| {
            let (w, d) = l.split_once(',').unwrap();
            (w.parse().unwrap(), d.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_pai_job_becomes_a_step_time_trace_with_its_mean_step_and_ratios() {
    let (dir, file) = scenario(PAI, "job_1_norm.csv");
    let out = dir.path().join("trace.csv");
    let o = import(&file, &out, &["--mean-ms", "20"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("kind = \"trace\""), "{stdout}");
    let r = rows(&std::fs::read_to_string(&out).unwrap());
    // 2 workers × 3 samples × 10 iterations (the last sample holds for the gap before it).
    assert_eq!(r.len(), 60);
    let of = |w: usize| -> Vec<f64> { r.iter().filter(|x| x.0 == w).map(|x| x.1).collect() };
    let (w0, w1) = (of(0), of(1));
    // The mean value, 500, is 20 ms: 400 is 16 ms, 800 is 32 ms, 600 is 24 ms.
    assert!(w0.iter().all(|&d| (d - 16.0).abs() < 1e-9), "{w0:?}");
    assert!(w1[..10].iter().all(|&d| (d - 16.0).abs() < 1e-9));
    assert!(w1[10..20].iter().all(|&d| (d - 32.0).abs() < 1e-9));
    assert!(w1[20..].iter().all(|&d| (d - 24.0).abs() < 1e-9));
    // Interleaved by iteration, as the trace reader takes them.
    assert_eq!(r[0].0, 0);
    assert_eq!(r[1].0, 1);

    // Interpolated: worker 1 climbs from 16 to 32 ms over iterations 1-10.
    let o = import(
        &file,
        &out,
        &["--mean-ms", "20", "--between", "interpolate", "--force"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = rows(&std::fs::read_to_string(&out).unwrap());
    let w1: Vec<f64> = r.iter().filter(|x| x.0 == 1).map(|x| x.1).collect();
    assert!((w1[5] - 24.0).abs() < 1e-9, "{:?}", &w1[..10]);
    assert!((w1[15] - 28.0).abs() < 1e-9, "{:?}", &w1[10..20]);

    // A scenario runs on it: two workers replaying their rows.
    let scenario_text = format!(
        "name = \"pai\"\n[cluster]\nworkers = 2\nstep_time_ms = 10.0\n\n\
         [[cluster.stragglers]]\nkind = \"trace\"\nworkers = \"all\"\nfile = \"{}\"\n\n\
         [model]\nkind = \"quadratic\"\ndim = 8\n\n[run]\nsim_time_s = 1.0\neval_every_s = 0.5\n\n\
         [[algorithms]]\nkind = \"allreduce\"\n",
        out.display()
    );
    let path = dir.path().join("pai.toml");
    std::fs::write(&path, scenario_text).unwrap();
    let o = dasim(&["validate", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_malformed_file_is_refused_naming_its_line_and_nothing_is_written() {
    let (dir, file) = scenario(
        ",worker,gpu,time,batch_time_norm\n0,0,25,1,400\n1,1,25,1,fast\n",
        "job.csv",
    );
    let out = dir.path().join("trace.csv");
    let run = |f: &std::path::Path| import(f, &out, &[]);
    let o = run(&file);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("job.csv:3") && err.contains("batch_time_norm `fast`"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
    // A missing file is bad input too.
    let o = run(&dir.path().join("missing.csv"));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.csv: cannot be read"));
    // A header that is not PAI's names the column it misses.
    let (_d, other) = scenario("worker,duration_ms\n0,10\n", "other.csv");
    let o = run(&other);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no `time` column"));
    // An existing output is kept without --force.
    std::fs::write(&out, "keep").unwrap();
    let (_d, good) = scenario(PAI, "good.csv");
    let o = run(&good);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");
}
