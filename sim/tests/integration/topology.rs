//! Topologies: static graphs, SGP's time-varying schedules, validation and spectral gaps.

use std::f64::consts::PI;
use std::path::PathBuf;

use dasim_sim::prelude::*;

fn build(cfg: &TopologyConfig, n: usize) -> Result<Topology, dasim_sim::ConfigError> {
    Topology::build(cfg, n, &BuildEnv::new(9))
}

fn scratch(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("topology-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn sgp_one_peer_schedule_for_8_nodes_follows_the_formula() {
    let s = PeerSchedule::one_peer_exponential(8);
    assert_eq!(s.period(), Some(3));
    for k in 0..3u64 {
        for i in 0..8 {
            let want = (i + (1 << (k % 3))) % 8;
            assert_eq!(s.out_peers(i, k), vec![want], "node {i}, iteration {k}");
            assert_eq!(s.in_peers(want, k), vec![i]);
        }
    }
    // Spelled out: 1, 2, 4 hops ahead, then again.
    assert_eq!(s.out_peers(5, 0), [6]);
    assert_eq!(s.out_peers(5, 1), [7]);
    assert_eq!(s.out_peers(5, 2), [1]);
    assert_eq!(s.out_peers(5, 3), [6]);
    assert_eq!(
        s.to_csv(0..3).lines().take(4).collect::<Vec<_>>(),
        ["iteration,src,dst", "0,0,1", "0,1,2", "0,2,3"]
    );
    assert_eq!(s.to_csv(0..3).lines().count(), 1 + 3 * 8);
    // A non-power of two: τ = ⌈log2 n⌉.
    let s = PeerSchedule::one_peer_exponential(6);
    assert_eq!(s.period(), Some(3));
    assert_eq!(s.out_peers(5, 2), [3]);
}

#[test]
fn sgp_two_peer_schedule_rotates_through_the_base_3_phone_book() {
    // n = 8: book [1, 2, 3, 6], two entries per iteration.
    let s = PeerSchedule::two_peer_exponential(8);
    assert_eq!(s.period(), Some(2));
    assert_eq!(s.out_peers(0, 0), [1, 2]);
    assert_eq!(s.out_peers(0, 1), [3, 6]);
    assert_eq!(s.out_peers(7, 1), [2, 5]);
    assert_eq!(s.out_peers(0, 2), [1, 2]);
    assert_eq!(s.in_peers(0, 1), [2, 5]);
    // n = 16: book [1, 2, 3, 6, 9] (18 mod 16 = 2 is a repeat), period 5.
    let s = PeerSchedule::two_peer_exponential(16);
    assert_eq!(s.period(), Some(5));
    let offsets: Vec<Vec<usize>> = (0..5).map(|k| s.out_peers(0, k)).collect();
    assert_eq!(offsets, [[1, 2], [3, 6], [9, 1], [2, 3], [6, 9]]);
    assert_eq!(s.out_peers(0, 5), [1, 2]);
    // Every node sends to two distinct others and receives from two.
    for k in 0..5 {
        for i in 0..16 {
            assert_eq!(s.out_peers(i, k).len(), 2);
            assert_eq!(s.in_peers(i, k).len(), 2);
        }
    }
}

#[test]
fn every_schedule_is_strongly_connected_over_a_period() {
    for n in 2..=70 {
        for s in [
            PeerSchedule::one_peer_exponential(n),
            PeerSchedule::two_peer_exponential(n),
        ] {
            let p = s.period().unwrap();
            assert_eq!(s.strong_components(0..p).len(), 1, "{} n = {n}", s.name());
            assert!(s.is_strongly_connected());
            // Periodic, and no node sends to itself.
            for i in 0..n {
                for k in 0..p {
                    assert_eq!(s.out_peers(i, k), s.out_peers(i, k + p));
                    assert!(!s.out_peers(i, k).contains(&i));
                }
            }
        }
    }
    // Less than a period may not be: for n = 8, iteration 1 alone (i → i+2) splits the nodes
    // into the even and the odd ones.
    let s = PeerSchedule::one_peer_exponential(8);
    assert_eq!(s.strong_components(1..2).len(), 2);
    assert!(PeerSchedule::random_peer(32, 1).is_strongly_connected());
}

#[test]
fn time_varying_topologies_carry_their_schedule() {
    let t = build(&TopologyConfig::OnePeerExponential {}, 8).unwrap();
    assert!(t.is_time_varying());
    assert_eq!(t.schedule().name(), "one-peer-exponential");
    assert_eq!(t.schedule().out_peers(3, 1), [5]);
    // The graph is the undirected union over a period: ±1, ±2, ±4.
    assert_eq!(t.neighbors(0), [1, 2, 4, 6, 7]);
    let t = build(&TopologyConfig::RandomPeer {}, 6).unwrap();
    assert_eq!(t.schedule().period(), None);
    assert_eq!(t.degree_stats().min, 5);
    // A static graph's schedule sends to every neighbour, always.
    let t = build(&TopologyConfig::Ring {}, 5).unwrap();
    assert!(!t.is_time_varying());
    assert_eq!(t.schedule().out_peers(0, 17), [1, 4]);
    assert_eq!(t.schedule().period(), Some(1));
}

#[test]
fn random_regular_graphs_have_the_requested_degree() {
    for (n, d) in [(20, 3), (20, 4), (21, 4), (50, 7), (10, 9)] {
        let t = build(&TopologyConfig::RandomRegular { degree: d }, n).unwrap();
        assert!(
            (0..n).all(|i| t.neighbors(i).len() == d),
            "n = {n}, d = {d}"
        );
        assert!(t.is_connected());
        let again = build(&TopologyConfig::RandomRegular { degree: d }, n).unwrap();
        assert_eq!(t.to_edge_list(), again.to_edge_list(), "same seed");
    }
    let other = Topology::build(
        &TopologyConfig::RandomRegular { degree: 3 },
        20,
        &BuildEnv::new(10),
    )
    .unwrap();
    assert_ne!(
        other.to_edge_list(),
        build(&TopologyConfig::RandomRegular { degree: 3 }, 20)
            .unwrap()
            .to_edge_list()
    );
    for (n, d) in [(7, 3), (5, 5), (5, 0)] {
        let e = build(&TopologyConfig::RandomRegular { degree: d }, n).unwrap_err();
        assert_eq!(e.path.to_string(), "topology.degree");
        assert!(e.hint.is_some());
    }
}

#[test]
fn a_disconnected_erdos_renyi_graph_is_an_error_naming_its_components() {
    let e = build(&TopologyConfig::ErdosRenyi { p: 0.05 }, 12).unwrap_err();
    assert_eq!(e.path.to_string(), "topology.p");
    assert!(
        e.message.contains("disconnected: components {"),
        "{}",
        e.message
    );
    assert!(e.hint.as_ref().unwrap().contains("ln(n)/n"), "{:?}", e.hint);
    let t = build(&TopologyConfig::ErdosRenyi { p: 0.5 }, 12).unwrap();
    assert!(t.is_connected());
    let full = build(&TopologyConfig::ErdosRenyi { p: 1.0 }, 6).unwrap();
    assert_eq!(full.degree_stats().min, 5);
    for p in [0.0, -0.1, 1.5, f64::NAN] {
        let e = build(&TopologyConfig::ErdosRenyi { p }, 12).unwrap_err();
        assert_eq!(e.path.to_string(), "topology.p");
    }
}

#[test]
fn edge_lists_are_read_from_files() {
    let file = scratch("square.csv", "src,dst\n0,1\n1 2\n2,3\n3,0 # closes it\n");
    let env = BuildEnv::new(1).with_base_dir(file.parent().unwrap());
    let cfg = TopologyConfig::EdgeList {
        file: "square.csv".into(),
    };
    let t = Topology::build(&cfg, 4, &env).unwrap();
    assert_eq!(t.neighbors(0), [1, 3]);
    assert_eq!(t.to_edge_list(), "src,dst\n0,1\n0,3\n1,2\n2,3\n");
    scratch("split.csv", "0,1\n2,3\n");
    let e = Topology::build(
        &TopologyConfig::EdgeList {
            file: "split.csv".into(),
        },
        4,
        &env,
    )
    .unwrap_err();
    assert_eq!(e.path.to_string(), "topology.file");
    assert!(e.message.contains("{0, 1} and {2, 3}"), "{}", e.message);
    let e = Topology::build(&cfg, 3, &env).unwrap_err();
    assert!(
        e.message.contains("node 3 is out of range"),
        "{}",
        e.message
    );
}

#[test]
fn static_graphs_have_their_degrees() {
    let t = build(&TopologyConfig::Exponential {}, 8).unwrap();
    assert!((0..8).all(|i| t.neighbors(i).len() == 5)); // ±1, ±2, 4
    assert_eq!(t.neighbors(0), [1, 2, 4, 6, 7]);
    let t = build(&TopologyConfig::Exponential {}, 16).unwrap();
    assert!((0..16).all(|i| t.neighbors(i).len() == 7));
    let s = build(&TopologyConfig::Star {}, 6).unwrap().degree_stats();
    assert_eq!((s.min, s.max), (1, 5));
    assert!((s.mean - 10.0 / 6.0).abs() < 1e-12);

    // Bipartite: complete between the sides, and the split is the configured one.
    let t = build(&TopologyConfig::Bipartite { active: None }, 6).unwrap();
    assert_eq!(
        t.bipartition().unwrap(),
        [true, false, true, false, true, false]
    );
    assert_eq!(t.neighbors(0), [1, 3, 5]);
    let t = build(
        &TopologyConfig::Bipartite {
            active: Some((4..6).into()),
        },
        6,
    )
    .unwrap();
    assert_eq!(
        t.bipartition().unwrap(),
        [false, false, false, false, true, true]
    );
    assert_eq!(t.neighbors(0), [4, 5]);
    assert!(t.to_dot().contains("  4 [style=filled];\n"));
    assert!(t.to_dot().contains("  0 -- 4;\n"));
    let e = build(
        &TopologyConfig::Bipartite {
            active: Some(WorkerSet::All),
        },
        6,
    )
    .unwrap_err();
    assert_eq!(e.path.to_string(), "topology.active");
}

#[test]
fn spectral_gaps_match_closed_forms() {
    for n in 4..=24 {
        let ring = build(&TopologyConfig::Ring {}, n).unwrap();
        let want = 1.0 - (1.0 + 2.0 * (2.0 * PI / n as f64).cos()) / 3.0;
        assert!((ring.spectral_gap() - want).abs() < 1e-10, "ring {n}");
    }
    for n in 2..=12 {
        let c = build(&TopologyConfig::Complete {}, n).unwrap();
        assert!((c.spectral_gap() - 1.0).abs() < 1e-10, "complete {n}");
    }
    for d in 1..=6u32 {
        let h = build(&TopologyConfig::Hypercube {}, 1 << d).unwrap();
        let want = 2.0 / (d as f64 + 1.0);
        assert!((h.spectral_gap() - want).abs() < 1e-10, "hypercube {d}");
    }
    // A star is not regular: Metropolis weights give eigenvalues 1, 1 − 1/n (n − 2 times), 0.
    for n in 3..=12 {
        let s = build(&TopologyConfig::Star {}, n).unwrap();
        assert!(
            (s.spectral_gap() - 1.0 / n as f64).abs() < 1e-10,
            "star {n}"
        );
    }
    // Metropolis weights are symmetric and doubly stochastic on any graph.
    let g = build(&TopologyConfig::ErdosRenyi { p: 0.3 }, 30).unwrap();
    let w = g.mixing_matrix();
    for i in 0..30 {
        assert!((w[i * 30..(i + 1) * 30].iter().sum::<f64>() - 1.0).abs() < 1e-12);
        for j in 0..30 {
            assert_eq!(w[i * 30 + j], w[j * 30 + i]);
        }
    }
    let gap = g.spectral_gap();
    assert!(gap > 0.0 && gap < 1.0);
    // Disconnected: no mixing.
    assert!(
        Topology::from_edges(4, [(0, 1), (2, 3)])
            .spectral_gap()
            .abs()
            < 1e-12
    );
}

#[test]
fn topology_tables_parse_from_toml_and_round_trip() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Doc {
        topology: TopologyConfig,
    }
    for (text, kind) in [
        ("kind = \"exponential\"", "exponential"),
        ("kind = \"random-regular\"\ndegree = 4", "random-regular"),
        ("kind = \"erdos-renyi\"\np = 0.3", "erdos-renyi"),
        ("kind = \"bipartite\"", "bipartite"),
        ("kind = \"bipartite\"\nactive = \"0..4\"", "bipartite"),
        ("kind = \"edge-list\"\nfile = \"g.csv\"", "edge-list"),
        ("kind = \"one-peer-exponential\"", "one-peer-exponential"),
        ("kind = \"two-peer-exponential\"", "two-peer-exponential"),
        ("kind = \"random-peer\"", "random-peer"),
    ] {
        let doc: Doc = toml::from_str(&format!("[topology]\n{text}\n")).unwrap();
        assert_eq!(doc.topology.kind(), kind);
        let back: Doc = toml::from_str(&toml::to_string(&doc).unwrap()).unwrap();
        assert_eq!(back, doc);
    }
    let e = toml::from_str::<Doc>("[topology]\nkind = \"random-regular\"\ndegre = 4\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("degre"), "{e}");
}

/// A kind that takes no keys rejects any it is given: a misspelt key (`peers` for an
/// exponential graph, `degree` for a ring) is an error, not silently ignored.
#[test]
fn kinds_without_keys_reject_unknown_keys() {
    for kind in [
        "ring",
        "complete",
        "star",
        "hypercube",
        "exponential",
        "one-peer-exponential",
        "two-peer-exponential",
        "random-peer",
    ] {
        let ok: TopologyConfig = toml::from_str(&format!("kind = \"{kind}\"")).unwrap();
        assert_eq!(ok.kind(), kind);
        let text = format!("kind = \"{kind}\"\ndegree = 4");
        let err = toml::from_str::<TopologyConfig>(&text)
            .expect_err(&format!("{kind} accepted an unknown key"))
            .to_string();
        assert!(err.contains("degree"), "{kind}: {err}");
    }
}
