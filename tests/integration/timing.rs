//! `[model] kind = "timing"`: a real model's size and cost without its numbers. A timing run has
//! exactly the schedule of a run that computes (the simulator's control flow never reads a
//! number), its step time follows from the preset's FLOPs, it runs at paper scale in a moment,
//! and everything it writes or prints says that no gradient was computed.

use crate::common;

use common::*;
use dasim_reports::rundir::RunData;

/// The small MLP scenario of the other end-to-end tests, with `model` in place of its model
/// and every algorithm whose schedule does not depend on layer costs.
fn with_model(model: &str, data: &str) -> String {
    let head = SMALL.split("[model]").next().unwrap();
    format!(
        r#"{head}{model}

{data}

[optimizer]
lr = 0.01

[run]
sim_time_s = 0.5
eval_every_s = 0.1

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "adpsgd"

[[algorithms]]
kind = "sgp"
topology = {{ kind = "one-peer-exponential" }}

[[algorithms]]
kind = "overlap-sgp"
tau = 2
topology = {{ kind = "one-peer-exponential" }}

[[algorithms]]
kind = "dasgd"
broadcast = "topology"

[[algorithms]]
kind = "ps"
servers = 2

[[algorithms]]
kind = "local-sgd"
h = 4
"#
    )
}

fn read(dir: &std::path::Path, file: &str) -> String {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    // The stamp line names the scenario's hash, which differs.
    text.lines().skip(1).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_timing_model_runs_the_schedule_of_the_model_it_stands_for() {
    let real = with_model(
        "[model]\nkind = \"mlp\"\nhidden = [16]",
        "[data]\nbatch_size = 16",
    );
    let (dir, path) = scenario(&real, "real.toml");
    let real_out = dir.path().join("real");
    run_flex(&path, &real_out);
    let real_data = RunData::load(&real_out).unwrap();
    let summary = real_data.summary.as_ref().unwrap();
    assert!(!summary.timing_only);

    // The same size (step times come from step_time_ms, so FLOPs do not matter here).
    let timing = with_model(
        &format!(
            "[model]\nkind = \"timing\"\nparams = {}\ntrain_samples = 1000",
            summary.params
        ),
        "[data]\nbatch_size = 16",
    );
    let (dir2, path2) = scenario(&timing, "timing.toml");
    let timing_out = dir2.path().join("timing");
    run_flex(&path2, &timing_out);

    for file in [
        "timeline.csv",
        "utilization.csv",
        "waits.csv",
        "links.csv",
        "staleness.csv",
    ] {
        assert_eq!(
            read(&real_out, file),
            read(&timing_out, file),
            "{file}: the timing run's schedule differs from the real model's"
        );
    }
    let timing_data = RunData::load(&timing_out).unwrap();
    let t = timing_data.summary.as_ref().unwrap();
    assert!(t.timing_only);
    for (r, t) in summary.runs.iter().zip(&t.runs) {
        assert_eq!(
            (r.events, r.worker_steps, r.messages, r.bytes),
            (t.events, t.worker_steps, t.messages, t.bytes),
            "{}",
            r.algorithm
        );
        assert_eq!(r.global_staleness, t.global_staleness, "{}", r.algorithm);
        assert_eq!(r.row_staleness, t.row_staleness, "{}", r.algorithm);
        assert_eq!(r.message_age, t.message_age, "{}", r.algorithm);
        assert_eq!(r.mix_age, t.mix_age, "{}", r.algorithm);
        assert!(r.final_loss.is_finite(), "{}", r.algorithm);
        assert!(
            t.final_loss.is_nan() && t.final_accuracy.is_nan() && t.final_consensus.is_nan(),
            "{}: a timing run reports no loss",
            t.algorithm
        );
        assert!(
            t.stopped.is_none(),
            "{}: NaN losses are not divergence",
            t.algorithm
        );
    }
    // No loss was measured: metrics.csv has its rows (time, steps, epochs) and empty losses;
    // no convergence plot is drawn, and every plot's title says what the run was.
    let metrics = read(&timing_out, "metrics.csv");
    assert!(
        metrics.lines().skip(1).all(|l| l.contains(",,,")),
        "{metrics}"
    );
    for plot in [
        "loss.png",
        "loss_epochs.png",
        "consensus.png",
        "train_loss.png",
    ] {
        assert!(!timing_out.join(plot).exists(), "{plot}");
    }
    assert!(real_out.join("loss.png").exists());
    assert!(timing_out.join("utilization.png").exists());
    assert!(
        timing_data
            .scenario_name()
            .ends_with("(timing only: no gradient computed)")
    );
}

#[test]
fn a_presets_step_time_follows_from_its_flops_and_the_device() {
    // ResNet-50: 2 × 4.09 GMAC forward, × 3 for a training step, 32 images on a 15.7 TFLOP/s
    // device (a V100's single-precision peak): 3 · 8.18e9 · 32 / 15.7e12 s = 50.017834… ms.
    let text = r#"seed = 1
[cluster]
workers = 256
device_tflops = 15.7

[network]
bandwidth_gbps = 10.0
latency_us = 5.0

[model]
kind = "timing"
preset = "resnet50"

[data]
batch_size = 32

[run]
sim_time_s = 1.0

[[algorithms]]
kind = "adpsgd"

[[algorithms]]
kind = "allreduce"
"#;
    let (dir, path) = scenario(text, "r50.toml");
    let out = dir.path().join("out");
    let o = dasim_run_flex(&path, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("timing only: no gradient computed") && !said.contains("test loss"),
        "{said}"
    );
    let timeline = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    let first = timeline
        .lines()
        .find(|l| l.starts_with("adpsgd,0,compute,0,"))
        .unwrap();
    assert_eq!(first, "adpsgd,0,compute,0,0.050017834,");
    let summary = RunData::load(&out).unwrap().summary.unwrap();
    assert_eq!(summary.params, 25_557_032);
    // A message carries the model: 25,557,032 floats of 4 bytes, plus the header.
    let adpsgd = &summary.runs[0];
    assert!(adpsgd.messages > 0);
    assert!(
        adpsgd.bytes >= adpsgd.messages * 4 * 25_557_032,
        "{adpsgd:?}"
    );
    let json = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(json.contains("\"timing_only\": true"), "{json}");
}

#[test]
fn bad_timing_models_are_clear_errors() {
    let base = SMALL.split("[model]").next().unwrap().to_owned();
    let tail = "\n[run]\nsim_time_s = 0.5\n\n[[algorithms]]\nkind = \"allreduce\"\n";
    for (model, extra, field, needle) in [
        (
            "kind = \"timing\"",
            "",
            "model",
            "a preset or a parameter count",
        ),
        (
            "kind = \"timing\"\npreset = \"resnet51\"",
            "",
            "model.preset",
            "unknown variant `resnet51`",
        ),
        (
            "kind = \"timing\"\npreset = \"vgg16\"\nparams = 10",
            "",
            "model.params",
            "a preset has its own size",
        ),
        (
            "kind = \"timing\"\npreset = \"gpt2-small\"",
            "",
            "model.train_samples",
            "no usual training-set size",
        ),
        (
            "kind = \"timing\"\nparams = 1000\ntrain_samples = 0",
            "",
            "model.train_samples",
            "at least one sample",
        ),
        (
            "kind = \"timing\"\npreset = \"resnet20\"",
            "[data]\ntest_fraction = 0.3\n",
            "data",
            "reads no data",
        ),
    ] {
        let text = format!("{base}[model]\n{model}\n\n{extra}{tail}");
        let (dir, path) = scenario(&text, "bad.toml");
        let o = dasim_run_flex(&path, &dir.path().join("out"), &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{model}: {err}");
        assert!(err.contains(needle), "{model}: {err}");
        assert!(
            err.contains("bad.toml:") && (field == "model.preset" || err.contains(field)),
            "{model}: {err}"
        );
        assert!(!dir.path().join("out").join("metrics.csv").exists());
    }

    // A claim about the loss of a run that computes none is refused up front.
    let text = format!(
        "{base}[model]\nkind = \"timing\"\npreset = \"resnet20\"\n{tail}\n[[expect]]\nmetric = \"final_loss\"\nop = \"<\"\nvalue = 1.0\n"
    );
    let (dir, path) = scenario(&text, "claim.toml");
    let o = dasim_run_flex(&path, &dir.path().join("out"), &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("timing"), "{err}");
}

/// Proxy mode: the small MLP trains for real while its steps and messages cost ResNet-50's.
fn proxy(model: &str, timed_as: &str) -> String {
    format!(
        r#"name = "proxy"
seed = 3

[cluster]
workers = 8
device_tflops = 15.7

[[cluster.stragglers]]
workers = [2]
factor = 2.0

[network]
bandwidth_gbps = 100.0
latency_us = 5.0

[topology]
kind = "ring"

{model}

{timed_as}

[data]
batch_size = 32

[optimizer]
lr = 0.01

[run]
sim_time_s = 0.6
eval_every_s = 0.2

[[algorithms]]
kind = "allreduce"

[[algorithms]]
kind = "adpsgd"

[[algorithms]]
kind = "sgp"
topology = {{ kind = "one-peer-exponential" }}

[[algorithms]]
kind = "dasgd"
broadcast = "topology"
"#
    )
}

#[test]
fn a_proxy_trains_a_small_model_on_a_big_ones_clock() {
    let (dir, path) = scenario(
        &proxy(
            "[model]\nkind = \"mlp\"\nhidden = [16]",
            "[timed_as]\npreset = \"resnet50\"",
        ),
        "proxy.toml",
    );
    let out = dir.path().join("proxy");
    run_flex(&path, &out);
    // The same clock as a timing run of ResNet-50 itself.
    let (dir2, path2) = scenario(
        &proxy("[model]\nkind = \"timing\"\npreset = \"resnet50\"", ""),
        "timing.toml",
    );
    let timing = dir2.path().join("timing");
    run_flex(&path2, &timing);
    for file in ["timeline.csv", "waits.csv", "links.csv", "staleness.csv"] {
        assert_eq!(read(&out, file), read(&timing, file), "{file}");
    }
    let data = RunData::load(&out).unwrap();
    let summary = data.summary.as_ref().unwrap();
    assert!(!summary.timing_only);
    assert!(
        summary
            .timed_as
            .as_deref()
            .is_some_and(|t| t.starts_with("resnet50 (25557032 parameters")),
        "{:?}",
        summary.timed_as
    );
    assert!(summary.params < 10_000, "the trained model is the MLP");
    for r in &summary.runs {
        assert!(
            r.final_loss.is_finite(),
            "{}: trained for real",
            r.algorithm
        );
    }
    // AD-PSGD's messages carry whole models: ResNet-50's, not the MLP's.
    let adpsgd = &summary.runs[1];
    assert!(adpsgd.messages > 0 && adpsgd.bytes >= adpsgd.messages * 4 * 25_557_032);
    assert_eq!(data.scenario_name(), "proxy (timed as resnet50)");

    // A timing model cannot be timed as another; a bad [timed_as] names its key.
    for (model, timed, needle) in [
        (
            "[model]\nkind = \"timing\"\npreset = \"resnet20\"",
            "[timed_as]\npreset = \"resnet50\"",
            "timed_as: a timing model is timed by its own",
        ),
        (
            "[model]\nkind = \"mlp\"",
            "[timed_as]\npreset = \"resnet50\"\nparams = 5",
            "timed_as.params",
        ),
    ] {
        let (d, p) = scenario(&proxy(model, timed), "bad.toml");
        let o = dasim(&["validate", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(needle), "{}", stderr(&o));
        drop(d);
    }
}

/// The memory estimate's messages queued behind the uplinks, in closed form. Four workers of
/// 10 ms steps broadcasting (DASGD, `broadcast = "all"`) a model of 12.5 M parameters (50 MB
/// per message) on 1 Gbit/s (125 MB/s): each posts 3 messages per step, 300 per second, and its
/// uplink carries 2.5 per second, so 297.5 per second pile up. Over 2 simulated seconds that is
/// 595 per worker, and the 3 of the step being sent: 598, 2,392 in all, holding 2,392 / 3
/// gradients (a timing model's buffers hold nothing). A worker-step or epoch budget stops it
/// sooner: 400 steps at 400 per second is one second, in which each worker posts only 300.
/// Forwarding along the ring posts 2 per step (the worker's neighbours); with a fast network
/// nothing piles up and only the step being sent is in flight; an algorithm that waits for its
/// replies posts none unthrottled.
#[test]
fn messages_queued_behind_the_uplinks_have_a_closed_form() {
    use dasim::Plan;
    use dasim::scenario::Loaded;
    use dasim_models::Execution;
    use dasim_models::memory::QUEUED_MESSAGE_BYTES;

    let estimate_on = |gbps: f64, run: &str, algorithm: &str| {
        let text = format!(
            r#"
[cluster]
workers = 4
step_time_ms = 10.0
[network]
bandwidth_gbps = {gbps}
[topology]
kind = "ring"
[model]
kind = "timing"
params = 12500000
train_samples = 32000
[data]
batch_size = 32
[run]
{run}
[[algorithms]]
{algorithm}
"#
        );
        let loaded = Loaded::from_str(std::path::Path::new("q.toml"), text)
            .unwrap_or_else(|e| panic!("{e}"));
        Plan::prepare(&loaded)
            .unwrap()
            .memory_estimate(Execution::default(), false)
    };
    let estimate = |run: &str, algorithm: &str| estimate_on(1.0, run, algorithm);
    let all = "kind = \"dasgd\"\nbroadcast = \"all\"";
    let e = estimate("sim_time_s = 2.0", all);
    assert_eq!(e.queued, 2_392 * QUEUED_MESSAGE_BYTES, "{e}");
    assert!(e.to_string().contains("queued in the network"), "{e}");
    assert_eq!(e.total(), e.queued, "a timing model holds no parameters");
    // 297.5 waiting and 3 in flight, but the run posts only 300 per worker.
    let e = estimate("sim_time_s = 2.0\nworker_steps = 400", all);
    assert_eq!(e.queued, 1_200 * QUEUED_MESSAGE_BYTES, "{e}");
    // So does an epoch budget: 0.4 epochs of 32,000 samples are 400 steps of 32.
    let e = estimate("sim_time_s = 2.0\nepochs = 0.4", all);
    assert_eq!(e.queued, 1_200 * QUEUED_MESSAGE_BYTES, "{e}");
    // Two neighbours on the ring: (200 − 2.5) per second and worker for 2 s, and 2 in flight.
    let e = estimate(
        "sim_time_s = 2.0",
        "kind = \"dasgd\"\nbroadcast = \"topology\"",
    );
    assert_eq!(e.queued, 1_588 * QUEUED_MESSAGE_BYTES, "{e}");
    // On 1 Tbit/s the uplinks carry 2,500 per second: only the 3 of each worker's step.
    let e = estimate_on(1000.0, "sim_time_s = 2.0", all);
    assert_eq!(e.queued, 12 * QUEUED_MESSAGE_BYTES, "{e}");
    for other in [
        "kind = \"adpsgd\"",
        "kind = \"allreduce\"",
        "kind = \"sgp\"",
    ] {
        let e = estimate("sim_time_s = 2.0", other);
        assert_eq!(e.queued, 0, "{other}: {e}");
        assert!(!e.to_string().contains("queued"), "{other}: {e}");
    }
}
