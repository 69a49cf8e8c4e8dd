//! `dasim inspect topology`: graphs and schedules as a researcher checks them.

use crate::common;

use common::*;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn sgp_one_peer_schedule_matches_its_formula() {
    let o = dasim(&[
        "inspect", "topology", "--peers", "1", "-n", "8", "--iters", "3", "--format", "schedule",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut expected = String::from("iteration,src,dst\n");
    for k in 0..3u32 {
        for i in 0..8 {
            expected += &format!("{k},{i},{}\n", (i + (1 << (k % 3))) % 8);
        }
    }
    assert_eq!(stdout(&o), expected);
}

#[test]
fn a_static_graph_reports_degree_and_spectral_gap() {
    let o = dasim(&["inspect", "topology", "--kind", "ring", "-n", "16"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("# degree: min 2 / mean 2.00 / max 2"), "{out}");
    // Ring with Metropolis weights 1/3: gap 1 − (1 + 2cos(2π/16))/3.
    let gap = 1.0 - (1.0 + 2.0 * (2.0 * std::f64::consts::PI / 16.0).cos()) / 3.0;
    assert!(out.contains(&format!("{gap:.6}")), "{out}");
    assert_eq!(out.lines().filter(|l| !l.starts_with('#')).count(), 1 + 16);
}

#[test]
fn a_scenario_topology_prints_as_dot() {
    let (_dir, path) = scenario(SMALL, "s.toml");
    let o = dasim(&[
        "inspect",
        "topology",
        path.to_str().unwrap(),
        "--format",
        "dot",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("graph topology {") && out.contains("0 -- 1"),
        "{out}"
    );
}

#[test]
fn bad_flags_are_clear_errors() {
    for (args, needle) in [
        (
            vec!["--kind", "ringg", "-n", "8"],
            "unknown variant `ringg`",
        ),
        (vec!["--peers", "3", "-n", "8"], "1 or 2 peers"),
        (vec!["--kind", "hypercube", "-n", "12"], "power-of-two"),
        (
            vec!["--kind", "erdos-renyi", "--p", "0.05", "-n", "12"],
            "disconnected: components {0}",
        ),
        (vec!["--kind", "ring"], "--workers"),
    ] {
        let mut all = vec!["inspect", "topology"];
        all.extend(&args);
        let o = dasim(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_algorithms_own_topology_is_inspected_by_its_label() {
    let text = SMALL.replacen(
        "[[algorithms]]",
        "[[algorithms]]\nkind = \"sgp\"\nlabel = \"sgp-exp\"\ntopology = { kind = \"one-peer-exponential\" }\n\n[[algorithms]]",
        1,
    );
    let (_dir, path) = scenario(&text, "s.toml");
    let path = path.to_str().unwrap();
    let o = dasim(&[
        "inspect",
        "topology",
        path,
        "--algorithm",
        "sgp-exp",
        "--format",
        "schedule",
        "--iters",
        "1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("iteration,src,dst\n0,0,1\n"),
        "{}",
        stdout(&o)
    );
    let o = dasim(&["inspect", "topology", path, "--algorithm", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no algorithm labelled `nope`"),
        "{}",
        stderr(&o)
    );
}
