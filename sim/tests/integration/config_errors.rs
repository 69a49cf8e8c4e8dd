//! Every invalid value of the cluster, network and topology sections fails with a ConfigError
//! that names the exact TOML path of the offending key and carries a hint.

use dasim_sim::ConfigError;
use dasim_sim::prelude::*;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default = "four")]
    cluster: ClusterConfig,
    #[serde(default)]
    network: NetworkConfig,
    #[serde(default)]
    topology: TopologyConfig,
}

fn four() -> ClusterConfig {
    ClusterConfig::new(4)
}

/// Parses a scenario fragment and builds all three models from it, as the binary does.
fn check(text: &str) -> Result<(), ConfigError> {
    let doc: Doc = toml::from_str(text).unwrap_or_else(|e| panic!("{text}\n{e}"));
    let env = BuildEnv::new(1).with_base_dir(env!("CARGO_TARGET_TMPDIR"));
    let n = doc.cluster.workers;
    doc.cluster.validate()?;
    doc.network.validate()?;
    Cluster::new(&doc.cluster, &env)?;
    Network::new(&doc.network, n, &env)?;
    Topology::build(&doc.topology, n, &env)?;
    Ok(())
}

fn straggler(body: &str) -> String {
    format!("[cluster]\nworkers = 4\n[[cluster.stragglers]]\n{body}\n")
}

#[test]
fn every_invalid_value_names_its_key_and_gives_a_hint() {
    let cases: Vec<(String, &str)> = vec![
        // Compute.
        ("[cluster]\nworkers = 1".into(), "cluster.workers"),
        (
            "[cluster]\nworkers = 4\nstep_time_ms = 0".into(),
            "cluster.step_time_ms",
        ),
        (
            "[cluster]\nworkers = 4\ndevice_tflops = -1".into(),
            "cluster.device_tflops",
        ),
        (
            "[cluster]\nworkers = 4\nstep_time_ms = 1\ndevice_tflops = 1".into(),
            "cluster.device_tflops",
        ),
        (
            "[cluster]\nworkers = 4\nflops_per_sample = 0".into(),
            "cluster.flops_per_sample",
        ),
        (
            "[cluster]\nworkers = 4\ndevice_tflops = 10".into(),
            "cluster.device_tflops",
        ),
        (
            "[cluster]\nworkers = 4\n[[cluster.groups]]\nworkers = [1]".into(),
            "cluster.groups[0].step_time_ms",
        ),
        (
            "[cluster]\nworkers = 4\n[[cluster.groups]]\nworkers = [1]\nstep_time_ms = -3".into(),
            "cluster.groups[0].step_time_ms",
        ),
        (
            "[cluster]\nworkers = 4\n[[cluster.groups]]\nworkers = \"2..9\"\nstep_time_ms = 3"
                .into(),
            "cluster.groups[0].workers",
        ),
        (
            straggler("workers = [1]\nfactor = 0.5"),
            "cluster.stragglers[0].factor",
        ),
        (
            straggler("workers = [9]\nfactor = 2"),
            "cluster.stragglers[0].workers",
        ),
        (
            straggler("workers = []\nfactor = 2"),
            "cluster.stragglers[0].workers",
        ),
        (
            straggler("workers = \"3..3\"\nfactor = 2"),
            "cluster.stragglers[0].workers",
        ),
        (
            straggler("workers = { fraction = 1.5 }\nfactor = 2"),
            "cluster.stragglers[0].workers",
        ),
        (
            straggler("workers = { count = 5 }\nfactor = 2"),
            "cluster.stragglers[0].workers",
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 2\nstart_s = 2\nend_s = 1"),
            "cluster.stragglers[0].end_s",
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 2\nstart_s = 2\nend_s = 2"),
            "cluster.stragglers[0].end_s",
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 2\nstart_s = -1"),
            "cluster.stragglers[0].start_s",
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 0.9\nstart_s = 1"),
            "cluster.stragglers[0].factor",
        ),
        (
            straggler(
                "kind = \"markov\"\nworkers = [1]\nfactor = 0.9\nmean_fast_s = 1\nmean_slow_s = 1",
            ),
            "cluster.stragglers[0].factor",
        ),
        (
            straggler("kind = \"markov\"\nworkers = [1]\nfactor = 2"),
            "cluster.stragglers[0].mean_fast_s",
        ),
        (
            straggler("kind = \"markov\"\nworkers = [1]\nfactor = 2\nmean_fast_s = 1"),
            "cluster.stragglers[0].mean_slow_s",
        ),
        (
            straggler(
                "kind = \"markov\"\nworkers = [1]\nfactor = 2\nmean_fast_s = 0\nmean_slow_s = 1",
            ),
            "cluster.stragglers[0].mean_fast_s",
        ),
        (
            straggler(
                "kind = \"markov\"\nworkers = [1]\nfactor = 2\nmean_fast_steps = 0.5\nmean_slow_steps = 3",
            ),
            "cluster.stragglers[0].mean_fast_steps",
        ),
        (
            straggler(
                "kind = \"markov\"\nworkers = [1]\nfactor = 2\nmean_fast_steps = 5\nmean_slow_s = 3",
            ),
            "cluster.stragglers[0].mean_fast_s",
        ),
        (
            straggler("kind = \"jitter\"\nworkers = [1]\ndistribution = \"lognormal\"\nmean = 0"),
            "cluster.stragglers[0].mean",
        ),
        (
            straggler("kind = \"jitter\"\nworkers = [1]\ndistribution = \"lognormal\"\nmean = 1"),
            "cluster.stragglers[0].cv",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"lognormal\"\nmean = 1\ncv = -0.1",
            ),
            "cluster.stragglers[0].cv",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"uniform\"\nmean = 1\ncv = 0.9",
            ),
            "cluster.stragglers[0].cv",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"exponential\"\nmean = 1\ncv = 1",
            ),
            "cluster.stragglers[0].cv",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"constant\"\nmean = 1\nshape = 1",
            ),
            "cluster.stragglers[0].shape",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"gamma\"\nmean = 1\ncv = 1\nshape = 1",
            ),
            "cluster.stragglers[0].shape",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"gamma\"\nmean = 1\nshape = 0",
            ),
            "cluster.stragglers[0].shape",
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"pareto\"\nmean = 1\nshape = 1",
            ),
            "cluster.stragglers[0].shape",
        ),
        (
            straggler("kind = \"jitter\"\nworkers = [1]\ndistribution = \"pareto\"\nmean = 1"),
            "cluster.stragglers[0].cv",
        ),
        (
            straggler(
                "kind = \"delay\"\nworkers = [1]\ndistribution = \"exponential\"\nmean_ms = -2",
            ),
            "cluster.stragglers[0].mean_ms",
        ),
        (
            straggler("kind = \"trace\"\nworkers = [1]\nfile = \"no/such/trace.csv\""),
            "cluster.stragglers[0].file",
        ),
        (
            straggler("kind = \"trace\"\nworkers = [1]\nfile = \"\""),
            "cluster.stragglers[0].file",
        ),
        // Network.
        (
            "[network]\nbandwidth_gbps = 0".into(),
            "network.bandwidth_gbps",
        ),
        (
            "[network]\nbandwidth_gbps = -10".into(),
            "network.bandwidth_gbps",
        ),
        ("[network]\nlatency_us = -1".into(), "network.latency_us"),
        (
            "[[network.nics]]\nworkers = [1]\nuplink_gbps = 0".into(),
            "network.nics[0].uplink_gbps",
        ),
        (
            "[[network.nics]]\nworkers = [7]\nuplink_gbps = 1".into(),
            "network.nics[0].workers",
        ),
        (
            "[[network.nics]]\nworkers = [1]".into(),
            "network.nics[0].workers",
        ),
        (
            "[[network.nics]]\nworkers = [1]\nbandwidth_gbps = 1\nuplink_gbps = 1".into(),
            "network.nics[0].bandwidth_gbps",
        ),
        (
            "[[network.links]]\nlink = \"0 -> 1\"\nbandwidth_gbps = -5".into(),
            "network.links[0].bandwidth_gbps",
        ),
        (
            "[[network.links]]\nlink = \"0 -> 9\"\nlatency_us = 1".into(),
            "network.links[0].link",
        ),
        (
            "[[network.links]]\nlink = \"2 <-> 2\"\nlatency_us = 1".into(),
            "network.links[0].link",
        ),
        (
            "[[network.links]]\nlink = \"0 -> 1\"\nlatency_us = 1\ndedicated = true".into(),
            "network.links[0].bandwidth_gbps",
        ),
        (
            "[[network.congestion]]\nstart_s = 3\nend_s = 1\nbandwidth_factor = 0.5".into(),
            "network.congestion[0].end_s",
        ),
        (
            "[[network.congestion]]\nstart_s = 0\nbandwidth_factor = 1.5".into(),
            "network.congestion[0].bandwidth_factor",
        ),
        (
            "[[network.congestion]]\nstart_s = 0\nbandwidth_factor = 0".into(),
            "network.congestion[0].bandwidth_factor",
        ),
        (
            "[[network.congestion]]\nstart_s = 0\nbandwidth_factor = 0.5\nlinks = [\"0 -> 4\"]"
                .into(),
            "network.congestion[0].links[0]",
        ),
        (
            "[[network.congestion]]\nstart_s = 0\nbandwidth_factor = 0.5\nworkers = [4]".into(),
            "network.congestion[0].workers",
        ),
        (
            "[[network.random_congestion]]\nmean_on_s = 0\nmean_off_s = 1\nbandwidth_factor = 0.5"
                .into(),
            "network.random_congestion[0].mean_on_s",
        ),
        (
            "[[network.random_congestion]]\nmean_on_s = 1\nmean_off_s = 1\nbandwidth_factor = 2"
                .into(),
            "network.random_congestion[0].bandwidth_factor",
        ),
        // Topology.
        (
            "[topology]\nkind = \"hypercube\"\n[cluster]\nworkers = 6".into(),
            "topology.kind",
        ),
        (
            "[topology]\nkind = \"torus\"\nrows = 3\ncols = 3".into(),
            "topology.rows",
        ),
        (
            "[topology]\nkind = \"erdos-renyi\"\np = 0.01\n[cluster]\nworkers = 10".into(),
            "topology.p",
        ),
        (
            "[topology]\nkind = \"random-regular\"\ndegree = 3\n[cluster]\nworkers = 5".into(),
            "topology.degree",
        ),
        (
            "[topology]\nkind = \"edge-list\"\nfile = \"no/such/graph.csv\"".into(),
            "topology.file",
        ),
        (
            "[topology]\nkind = \"bipartite\"\nactive = [0, 1, 2, 3]".into(),
            "topology.active",
        ),
        (
            "[topology]\nkind = \"bipartite\"\nactive = [5]".into(),
            "topology.active",
        ),
    ];
    for (text, path) in &cases {
        let e = check(text).expect_err(text);
        assert_eq!(e.path.to_string(), *path, "{text}\n{e}");
        assert!(e.hint.is_some(), "no hint for {path}: {e}");
        assert!(!e.message.is_empty());
    }
    // And a valid scenario using everything passes.
    check(
        "[cluster]\nworkers = 4\n[[cluster.stragglers]]\nkind = \"window\"\nworkers = \"all\"\nfactor = 2\nstart_s = 1\n[network]\npreset = \"ib-hdr\"\n[topology]\nkind = \"two-peer-exponential\"",
    )
    .unwrap();
}

/// The largest time a scenario may give, 2^63 ns, as each unit's message states it.
const MAX_S: &str = "at most 9223372036.854776 s";
const MAX_MS: &str = "at most 9223372036854.775 ms";
const MAX_US: &str = "at most 9.223372036854776e15 µs";

/// Every time and count that would overflow simulated time or a counter, and every duration
/// shorter than the clock's 1 ns, is refused at its key, and the message names the key and
/// states the limit in the key's unit.
#[test]
fn values_beyond_the_clock_are_rejected_with_their_path_and_limit() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::write(dir.join("limits-long.csv"), "duration_ms\n10\n1e13\n").unwrap();
    std::fs::write(dir.join("limits-short.csv"), "duration_ms\n10\n1e-7\n").unwrap();
    let markov = |keys: &str| {
        straggler(&format!(
            "kind = \"markov\"\nworkers = [1]\nfactor = 2\n{keys}"
        ))
    };
    let cases: Vec<(String, &str, &str)> = vec![
        // Step times, given or per group.
        (
            "[cluster]\nworkers = 4\nstep_time_ms = 1e13".into(),
            "cluster.step_time_ms",
            MAX_MS,
        ),
        (
            "[cluster]\nworkers = 4\nstep_time_ms = 1e-9".into(),
            "cluster.step_time_ms",
            "at least 1e-6 ms",
        ),
        (
            "[cluster]\nworkers = 4\n[[cluster.groups]]\nworkers = [1]\nstep_time_ms = 1e300"
                .into(),
            "cluster.groups[0].step_time_ms",
            MAX_MS,
        ),
        // Step times × factors: a fixed factor of 1e300 on a 10 ms step, and the entry whose
        // factor crosses the limit when several combine.
        (
            straggler("workers = [1]\nfactor = 1e300"),
            "cluster.stragglers[0].factor",
            "factor can be at most 922337203685.4775",
        ),
        (
            format!(
                "{}[[cluster.stragglers]]\nworkers = \"all\"\nfactor = 1e6\n",
                straggler("workers = [1]\nfactor = 1e6")
            ),
            "cluster.stragglers[1].factor",
            "factor can be at most 922337.2036854776",
        ),
        (
            straggler(
                "kind = \"markov\"\nworkers = [1]\nfactor = 1e15\nmean_fast_s = 1\nmean_slow_s = 1",
            ),
            "cluster.stragglers[0].factor",
            MAX_MS,
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 1e15\nstart_s = 1"),
            "cluster.stragglers[0].factor",
            MAX_MS,
        ),
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"lognormal\"\nmean = 1e15\ncv = 0.1",
            ),
            "cluster.stragglers[0].mean",
            "mean can be at most 922337203685.4775",
        ),
        // A mean factor that makes the mean step shorter than 1 ns.
        (
            straggler(
                "kind = \"jitter\"\nworkers = [1]\ndistribution = \"constant\"\nmean = 1e-9",
            ),
            "cluster.stragglers[0].mean",
            "the mean factor must be at least 1e-7",
        ),
        // Delays, Markov sojourns, windows.
        (
            straggler(
                "kind = \"delay\"\nworkers = [1]\ndistribution = \"exponential\"\nmean_ms = 1e20",
            ),
            "cluster.stragglers[0].mean_ms",
            MAX_MS,
        ),
        (
            markov("mean_fast_s = 1e30\nmean_slow_s = 1"),
            "cluster.stragglers[0].mean_fast_s",
            MAX_S,
        ),
        (
            markov("mean_fast_s = 1\nmean_slow_s = 1e-12"),
            "cluster.stragglers[0].mean_slow_s",
            "at least 1e-9 s",
        ),
        (
            markov("mean_fast_steps = 1e30\nmean_slow_steps = 3"),
            "cluster.stragglers[0].mean_fast_steps",
            "at most 9007199254740992 steps",
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 2\nstart_s = 1e30"),
            "cluster.stragglers[0].start_s",
            MAX_S,
        ),
        (
            straggler("kind = \"window\"\nworkers = [1]\nfactor = 2\nstart_s = 1\nend_s = 1e30"),
            "cluster.stragglers[0].end_s",
            MAX_S,
        ),
        // Trace durations, located at the file with the line.
        (
            straggler("kind = \"trace\"\nworkers = [1]\nfile = \"limits-long.csv\""),
            "cluster.stragglers[0].file",
            MAX_MS,
        ),
        (
            straggler("kind = \"trace\"\nworkers = [1]\nfile = \"limits-short.csv\""),
            "cluster.stragglers[0].file",
            "line 3: duration_ms = 1e-7 ms is shorter than 1 ns",
        ),
        // Network: latencies, bandwidths, the header, congestion windows and sojourns.
        (
            "[network]\nlatency_us = 1e30".into(),
            "network.latency_us",
            MAX_US,
        ),
        (
            "[[network.nics]]\nworkers = [1]\nlatency_us = 1e30".into(),
            "network.nics[0].latency_us",
            MAX_US,
        ),
        (
            "[[network.links]]\nlink = \"0 -> 1\"\nlatency_us = 1e30".into(),
            "network.links[0].latency_us",
            MAX_US,
        ),
        (
            "[network]\nbandwidth_gbps = 1e-12".into(),
            "network.bandwidth_gbps",
            "at least 8e-9 Gbit/s",
        ),
        (
            "[[network.nics]]\nworkers = [1]\nuplink_gbps = 1e300".into(),
            "network.nics[0].uplink_gbps",
            "at most 147573952589.67642 Gbit/s",
        ),
        (
            "[network]\nheader_bytes = 5000000000".into(),
            "network.header_bytes",
            "at most 4294967296 bytes",
        ),
        (
            "[[network.congestion]]\nstart_s = 1e30\nbandwidth_factor = 0.5".into(),
            "network.congestion[0].start_s",
            MAX_S,
        ),
        (
            "[[network.congestion]]\nstart_s = 0\nend_s = 1e30\nbandwidth_factor = 0.5".into(),
            "network.congestion[0].end_s",
            MAX_S,
        ),
        (
            "[[network.random_congestion]]\nmean_on_s = 1e30\nmean_off_s = 1\nbandwidth_factor = 0.5"
                .into(),
            "network.random_congestion[0].mean_on_s",
            MAX_S,
        ),
        (
            "[[network.random_congestion]]\nmean_on_s = 1\nmean_off_s = 1e-10\nbandwidth_factor = 0.5"
                .into(),
            "network.random_congestion[0].mean_off_s",
            "at least 1e-9 s",
        ),
    ];
    for (text, path, limit) in &cases {
        let e = check(text).expect_err(text);
        assert_eq!(e.path.to_string(), *path, "{text}\n{e}");
        assert!(e.hint.is_some(), "no hint for {path}: {e}");
        assert!(e.message.contains(limit), "`{limit}` not in: {e}");
        let key = path.rsplit('.').next().unwrap();
        assert!(e.message.contains(key), "the message names no key: {e}");
    }
    // The limits themselves are legal.
    check("[cluster]\nworkers = 4\nstep_time_ms = 9223372036854.775").unwrap();
    check("[cluster]\nworkers = 4\nstep_time_ms = 1e-6").unwrap();
    check(&straggler("workers = [1]\nfactor = 9e11")).unwrap();
    check("[network]\nbandwidth_gbps = 8e-9\nlatency_us = 9.2e15\nheader_bytes = 4294967296")
        .unwrap();
}

/// A step time derived from `device_tflops` must last at least 1 ns and fit the clock; the
/// error is at `device_tflops` and states the range of speeds for the model and batch.
#[test]
fn derived_step_times_outside_the_clock_are_rejected_at_device_tflops() {
    // 1e9 FLOPs per sample × 32 samples = 3.2e10 FLOPs: 3.2e7 TFLOP/s is a 1 ns step.
    let env = BuildEnv::new(1).with_batch_size(32);
    let go = |tflops: f64| {
        let mut c = ClusterConfig::new(4);
        c.device_tflops = Some(tflops);
        c.flops_per_sample = Some(1e9);
        Cluster::new(&c, &env).map(|c| c.base_step_time(0))
    };
    assert_eq!(go(3.2e7).unwrap(), SimTime::from_nanos(1));
    let e = go(1e9).unwrap_err();
    assert_eq!(e.path.to_string(), "cluster.device_tflops");
    assert!(e.message.contains("shorter than 1 ns"), "{e}");
    assert!(e.message.contains("at most 32000000 TFLOP/s"), "{e}");
    let e = go(1e-12).unwrap_err();
    assert_eq!(e.path.to_string(), "cluster.device_tflops");
    assert!(
        e.message.contains("at least 3.469446951953614e-12 TFLOP/s"),
        "{e}"
    );
    assert!(e.message.contains(MAX_S), "{e}");
    // A group's speed is checked the same way, at its own key.
    let mut c = ClusterConfig::new(4);
    c.flops_per_sample = Some(1e9);
    c.groups = toml::from_str::<Groups>("[[groups]]\nworkers = [2]\ndevice_tflops = 1e12")
        .unwrap()
        .groups;
    let e = Cluster::new(&c, &env).unwrap_err();
    assert_eq!(e.path.to_string(), "cluster.groups[0].device_tflops");
}

#[derive(serde::Deserialize)]
struct Groups {
    groups: Vec<dasim_sim::cluster::GroupConfig>,
}

/// The `[run]` and `[metrics]` times: the time limit, the evaluation interval and the timeline
/// window.
#[test]
fn run_and_metrics_times_beyond_the_clock_are_rejected() {
    let run = |text: &str| {
        toml::from_str::<RunConfig>(text)
            .unwrap()
            .validate()
            .map_err(|e| (e.path.to_string(), e.to_string()))
    };
    for (text, path, limit) in [
        ("sim_time_s = 1e30", "run.sim_time_s", MAX_S),
        (
            "worker_steps = 9\neval_every_s = 1e30",
            "run.eval_every_s",
            MAX_S,
        ),
        (
            "sim_time_s = 1\neval_every_s = 1e-12",
            "run.eval_every_s",
            "at least 1e-9 s",
        ),
    ] {
        let (p, msg) = run(text).expect_err(text);
        assert_eq!(p, path, "{msg}");
        assert!(msg.contains(limit) && msg.contains(path), "{msg}");
    }
    // The largest time limit is legal.
    run("sim_time_s = 9223372036.854776\neval_every_s = 9223372036.854776").unwrap();

    let metrics = |text: &str| {
        toml::from_str::<dasim_sim::record::MetricsConfig>(text)
            .unwrap()
            .validate()
    };
    for text in ["timeline_s = [0.0, 1e30]", "timeline_s = [1e30, 2e30]"] {
        let e = metrics(text).expect_err(text);
        assert_eq!(e.path.to_string(), "metrics.timeline_s");
        assert!(e.message.contains(MAX_S), "{e}");
    }
    metrics("timeline_s = [0.0, 9223372036.854776]").unwrap();
}
