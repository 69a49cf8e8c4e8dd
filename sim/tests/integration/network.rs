//! The network model: serialization at NICs, overrides, presets, congestion, message sizes.

use dasim_sim::net::{CongestionWindow, LinkConfig, NicConfig, RandomCongestion};
use dasim_sim::prelude::*;

/// 8 Gbit/s = 1e9 bytes/s: one byte per nanosecond.
const ONE_BYTE_PER_NS: f64 = 8.0;

fn build(cfg: &NetworkConfig, nodes: usize) -> Network {
    Network::new(cfg, nodes, &BuildEnv::new(5)).unwrap()
}

fn ns(t: SimTime) -> u64 {
    t.as_nanos()
}

#[test]
fn a_parameter_server_receives_n_messages_in_n_s_over_b() {
    for (n, s_bytes, gbps, alpha_us) in [(4, 1_000_000u64, 10.0, 5.0), (16, 123_457, 25.0, 2.0)] {
        let mut net = build(&NetworkConfig::uniform(gbps, alpha_us), n + 1);
        let ps = n;
        let arrivals: Vec<u64> = (0..n)
            .map(|w| ns(net.send(SimTime::ZERO, w, ps, s_bytes)))
            .collect();
        let per = ns(net.serialization_time(s_bytes));
        let b = gbps * 1e9 / 8.0;
        assert!((per as f64 - s_bytes as f64 / b * 1e9).abs() <= 1.0);
        let alpha = ns(net.latency());
        // The k-th message finishes arriving after k·S/B: the downlink serializes them.
        for (k, &t) in arrivals.iter().enumerate() {
            assert_eq!(t, (k as u64 + 1) * per + alpha, "n = {n}, message {k}");
        }
        assert_eq!(*arrivals.last().unwrap() - alpha, n as u64 * per);
        // The same n messages to n different receivers all arrive after S/B.
        let mut net = build(&NetworkConfig::uniform(gbps, alpha_us), 2 * n);
        for w in 0..n {
            assert_eq!(ns(net.send(SimTime::ZERO, w, n + w, s_bytes)), per + alpha);
        }
    }
}

#[test]
fn sharding_a_server_divides_its_receive_time() {
    // n workers each send S/k bytes to each of k servers at once, worker w starting with shard
    // w mod k (as the parameter server does). Each server's downlink receives n pieces of S/k:
    // the last arrives after n·S/(kB); each worker's uplink sends its k pieces back to back,
    // which is not the bottleneck when k ≤ n. No head-of-line blocking: a busy server does not
    // hold a worker's uplink from serving the next server.
    let (n, s_bytes) = (8usize, 8_000u64);
    for k in [1usize, 2, 4] {
        let mut net = build(&NetworkConfig::uniform(ONE_BYTE_PER_NS, 0.0), n + k);
        let mut last = 0;
        for round in 0..k {
            for w in 0..n {
                let shard = (w + round) % k;
                last = last.max(ns(net.send(
                    SimTime::ZERO,
                    w,
                    n + shard,
                    s_bytes / k as u64,
                )));
            }
        }
        assert_eq!(last, n as u64 * s_bytes / k as u64, "k = {k}");
    }
}

#[test]
fn messages_between_a_pair_arrive_in_order() {
    let mut net = build(&NetworkConfig::uniform(ONE_BYTE_PER_NS, 1.0), 3);
    // A large message to a busy receiver, then a small one to the same receiver.
    net.send(SimTime::ZERO, 2, 1, 10_000);
    let big = net.send(SimTime::ZERO, 0, 1, 5_000);
    let small = net.send(SimTime::from_nanos(1), 0, 1, 10);
    assert!(small > big, "{small:?} <= {big:?}");
}

#[test]
fn presets_use_their_documented_figures() {
    let figures = [
        ("1gbe", 1.0, 50.0),
        ("10gbe", 10.0, 5.0),
        ("25gbe", 25.0, 5.0),
        ("40gbe", 40.0, 5.0),
        ("100gbe", 100.0, 2.0),
        ("ib-edr", 100.0, 1.0),
        ("ib-hdr", 200.0, 1.0),
        ("ib-ndr", 400.0, 1.0),
        ("nvlink3", 2400.0, 1.0),
        ("nvlink4", 3600.0, 1.0),
    ];
    assert_eq!(Fabric::ALL.len(), figures.len());
    for (fabric, (name, gbps, us)) in Fabric::ALL.into_iter().zip(figures) {
        assert_eq!(
            (fabric.name(), fabric.bandwidth_gbps(), fabric.latency_us()),
            (name, gbps, us)
        );
        let net = build(&NetworkConfig::preset(fabric), 2);
        assert_eq!(
            net.link_bandwidth(0, 1),
            (gbps * 1e9 / 8.0) as u64,
            "{name}"
        );
        assert_eq!(net.latency(), SimTime::from_micros_f64(us), "{name}");
    }
    // Explicit keys override the preset; nothing set is 10 GbE.
    let mut cfg = NetworkConfig::preset(Fabric::Gbe25);
    cfg.latency_us = Some(0.5);
    let net = build(&cfg, 2);
    assert_eq!(net.link_bandwidth(0, 1), 3_125_000_000);
    assert_eq!(net.latency(), SimTime::from_nanos(500));
    let net = build(&NetworkConfig::default(), 2);
    assert_eq!(net.link_bandwidth(0, 1), 1_250_000_000);
    assert_eq!(net.latency(), SimTime::from_micros_f64(5.0));
    assert_eq!(
        NetworkConfig::preset(Fabric::IbHdr).resolved(),
        NetworkConfig {
            preset: Some(Fabric::IbHdr),
            bandwidth_gbps: Some(200.0),
            latency_us: Some(1.0),
            ..Default::default()
        }
    );
}

#[test]
fn nic_overrides_change_one_worker_and_latency_is_the_larger_end() {
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 1.0);
    cfg.nics = vec![
        NicConfig {
            workers: vec![1].into(),
            bandwidth_gbps: None,
            uplink_gbps: Some(ONE_BYTE_PER_NS / 4.0),
            downlink_gbps: None,
            latency_us: Some(10.0),
        },
        NicConfig {
            workers: vec![2].into(),
            bandwidth_gbps: None,
            uplink_gbps: None,
            downlink_gbps: Some(ONE_BYTE_PER_NS / 2.0),
            latency_us: None,
        },
    ];
    let mut net = build(&cfg, 4);
    // 1 -> 0: slow uplink (4 ns/byte), latency max(10, 1) µs.
    assert_eq!(ns(net.send(SimTime::ZERO, 1, 0, 1000)), 4000 + 10_000);
    // 0 -> 1: worker 1's downlink is normal; the latency is still the larger end's.
    assert_eq!(ns(net.send(SimTime::ZERO, 0, 1, 1000)), 1000 + 10_000);
    // 3 -> 2: slow downlink (2 ns/byte).
    assert_eq!(ns(net.send(SimTime::ZERO, 3, 2, 1000)), 2000 + 1000);
    // 0 -> 3: untouched (0's uplink is free again after the first message, at 1000 ns).
    assert_eq!(
        ns(net.send(SimTime::from_nanos(1000), 0, 3, 1000)),
        2000 + 1000
    );
}

#[test]
fn link_overrides_cap_a_pair_and_dedicated_links_bypass_the_nics() {
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 1.0);
    cfg.links = vec![
        LinkConfig {
            link: "0 -> 1".parse().unwrap(),
            bandwidth_gbps: Some(ONE_BYTE_PER_NS / 10.0),
            latency_us: Some(50.0),
            dedicated: false,
        },
        LinkConfig {
            link: "2 <-> 3".parse().unwrap(),
            bandwidth_gbps: Some(ONE_BYTE_PER_NS * 100.0),
            latency_us: Some(0.1),
            dedicated: true,
        },
    ];
    let mut net = build(&cfg, 4);
    assert_eq!(net.link_bandwidth(0, 1), 100_000_000);
    assert_eq!(
        net.link_bandwidth(1, 0),
        1_000_000_000,
        "one direction only"
    );
    assert_eq!(net.link_latency(0, 1), SimTime::from_micros_f64(50.0));
    assert_eq!(net.link_latency(1, 0), SimTime::from_micros_f64(1.0));
    // The capped link: 10 ns per byte, and its latency.
    assert_eq!(ns(net.send(SimTime::ZERO, 0, 1, 1000)), 10_000 + 50_000);
    // Above the NIC rate, a plain override cannot raise it; a dedicated link has its own rate.
    assert_eq!(net.link_bandwidth(2, 3), 100_000_000_000);
    assert_eq!(net.link_bandwidth(3, 2), 100_000_000_000);
    // The dedicated link does not occupy 2's uplink: 2 -> 0 over the NICs runs in parallel.
    let over_link = ns(net.send(SimTime::ZERO, 2, 3, 100_000));
    let over_nic = ns(net.send(SimTime::ZERO, 2, 0, 1000));
    assert_eq!(over_link, 1000 + 100);
    assert_eq!(over_nic, 1000 + 1000);
    // But it is FIFO itself.
    assert_eq!(ns(net.send(SimTime::ZERO, 2, 3, 100_000)), 2000 + 100);

    // Congestion of the whole network, or of worker 2's NIC, leaves the dedicated link alone;
    // naming the link in `links` reaches it.
    let mut all = window(0.0, None, 0.5);
    let mut nic = window(0.0, None, 0.5);
    nic.workers = Some(vec![2].into());
    let mut named = window(0.0, None, 0.5);
    named.links = Some(vec!["2 -> 3".parse().unwrap()]);
    for (w, dedicated_ns) in [(all.clone(), 1000), (nic, 1000), (named, 2000)] {
        let mut c = cfg.clone();
        c.congestion = vec![w];
        let mut net = build(&c, 4);
        assert_eq!(
            ns(net.send(SimTime::ZERO, 2, 3, 100_000)),
            dedicated_ns + 100
        );
    }
    all.links = None;
    cfg.congestion = vec![all];
    let mut net = build(&cfg, 4);
    assert_eq!(
        ns(net.send(SimTime::ZERO, 2, 0, 1000)),
        2000 + 1000,
        "NIC traffic is slowed"
    );
}

fn window(start_s: f64, end_s: Option<f64>, factor: f64) -> CongestionWindow {
    CongestionWindow {
        start_s,
        end_s,
        bandwidth_factor: factor,
        links: None,
        workers: None,
    }
}

#[test]
fn congestion_windows_scale_throughput_exactly() {
    let us = 1e-6;
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 0.0);
    cfg.congestion = vec![window(1.0 * us, Some(2.0 * us), 0.5)];
    let mut net = build(&cfg, 4);
    // Entirely before the window: unchanged.
    assert_eq!(ns(net.send(SimTime::ZERO, 0, 1, 500)), 500);
    // Entirely inside: half the rate, twice the time.
    assert_eq!(
        ns(net.send(SimTime::from_nanos(1000), 2, 3, 400)),
        1000 + 800
    );
    // Straddling: 1000 bytes in [0, 1 µs), 500 in [1, 2 µs) at half rate, 500 after: 2.5 µs.
    let mut net = build(&cfg, 4);
    assert_eq!(ns(net.send(SimTime::ZERO, 0, 1, 2000)), 2500);
    // Overlapping windows multiply; an open window never closes.
    cfg.congestion.push(window(1.5 * us, None, 0.25));
    let mut net = build(&cfg, 4);
    // [0,1000): 1000 B; [1000,1500) at 1/2: 250 B; [1500,2000) at 1/8: 62.5 B; then 1/4.
    // 2000 B: 1000 + 250 + 62.5 = 1312.5 by 2000 ns, 687.5 B left at 0.25 B/ns = 2750 ns.
    assert_eq!(ns(net.send(SimTime::ZERO, 0, 1, 2000)), 4750);
    // Throughput over a long transfer inside a window is exactly the factor.
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 0.0);
    cfg.congestion = vec![window(0.0, Some(1.0), 0.3)];
    let mut net = build(&cfg, 2);
    let end = ns(net.send(SimTime::ZERO, 0, 1, 30_000_000));
    assert_eq!(end, 100_000_000);
}

#[test]
fn congestion_can_cover_chosen_links_or_workers() {
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 0.0);
    let mut on_link = window(0.0, None, 0.5);
    on_link.links = Some(vec!["0 -> 1".parse().unwrap()]);
    let mut on_worker = window(0.0, None, 0.25);
    on_worker.workers = Some(vec![3].into());
    cfg.congestion = vec![on_link, on_worker];
    let mut net = build(&cfg, 5);
    let t = |net: &mut Network, a, b| ns(net.send(SimTime::ZERO, a, b, 1000));
    assert_eq!(t(&mut net, 0, 1), 2000);
    assert_eq!(t(&mut net, 1, 0), 1000, "the other direction is clear");
    assert_eq!(t(&mut net, 2, 3), 4000, "into worker 3");
    assert_eq!(t(&mut net, 3, 4), 4000, "out of worker 3");
    assert_eq!(t(&mut net, 4, 2), 1000);
}

#[test]
fn random_congestion_is_reproducible_and_has_the_stated_duty_cycle() {
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 0.0);
    cfg.random_congestion = vec![RandomCongestion {
        mean_on_s: 0.02,
        mean_off_s: 0.08,
        bandwidth_factor: 0.25,
        links: Some(vec!["0 -> 1".parse().unwrap()]),
        workers: None,
    }];
    // Back-to-back 100 kB messages for 100 simulated seconds (~1000 on/off cycles).
    let stream = |seed: u64| {
        let mut net = Network::new(&cfg, 3, &BuildEnv::new(seed)).unwrap();
        let mut t = SimTime::ZERO;
        let mut ends = Vec::new();
        while t < SimTime::from_secs_f64(100.0) {
            t = net.send(t, 0, 1, 100_000);
            ends.push(t);
        }
        (ends, net)
    };
    let (a, mut net) = stream(1);
    let (b, _) = stream(1);
    let (c, _) = stream(2);
    assert_eq!(a, b, "same seed, same congestion");
    assert_ne!(a, c);
    // Congested 20% of the time at a quarter of the rate: mean rate 0.8 + 0.2·0.25 = 0.85.
    let bytes = a.len() as f64 * 1e5;
    let rate = bytes / a.last().unwrap().as_nanos() as f64;
    assert!((rate - 0.85).abs() < 0.02, "mean rate {rate} bytes/ns");
    // An uncovered link is never congested.
    let t0 = SimTime::from_secs_f64(200.0);
    assert_eq!(ns(net.send(t0, 1, 2, 100_000) - t0), 100_000);
}

#[test]
fn message_sizes_follow_dtype_and_header() {
    let mut cfg = NetworkConfig::uniform(ONE_BYTE_PER_NS, 0.0);
    assert_eq!(cfg.payload_bytes(1000), 4000);
    cfg.dtype = Dtype::Bf16;
    cfg.header_bytes = 64;
    assert_eq!(cfg.payload_bytes(1000), 2000);
    assert_eq!(cfg.message_bytes(1000), 2064);
    cfg.dtype = Dtype::Fp16;
    let mut net = build(&cfg, 2);
    assert_eq!(net.payload_bytes(1000), 2000);
    // send takes the payload and adds the header on the wire.
    assert_eq!(ns(net.send(SimTime::ZERO, 0, 1, 2000)), 2064);
    assert_eq!(net.stats().bytes, 2064);
}

#[test]
fn network_tables_parse_from_toml_and_round_trip() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Doc {
        network: NetworkConfig,
    }
    let text = r#"
[network]
preset = "25gbe"
latency_us = 3.0
dtype = "bf16"
header_bytes = 64

[[network.nics]]
workers = [3]
uplink_gbps = 1.0

[[network.links]]
link = "0 <-> 1"
bandwidth_gbps = 2400.0
latency_us = 1.0
dedicated = true

[[network.congestion]]
start_s = 2.0
end_s = 4.0
bandwidth_factor = 0.25

[[network.congestion]]
start_s = 1.0
bandwidth_factor = 0.5
links = ["2 -> 3", "4 <-> 5"]

[[network.random_congestion]]
mean_on_s = 0.5
mean_off_s = 5.0
bandwidth_factor = 0.3
workers = "8..16"
"#;
    let doc: Doc = toml::from_str(text).unwrap();
    let n = &doc.network;
    assert_eq!(n.preset, Some(Fabric::Gbe25));
    assert_eq!(n.dtype, Dtype::Bf16);
    assert_eq!(n.links[0].link.pairs(), vec![(0, 1), (1, 0)]);
    assert_eq!(n.congestion[1].links.as_ref().unwrap().len(), 2);
    n.validate_nodes(16).unwrap();
    let back: Doc = toml::from_str(&toml::to_string(&doc).unwrap()).unwrap();
    assert_eq!(back, doc);
    for (bad, needle) in [
        ("preset = \"10gbit\"", "10gbit"),
        ("dtype = \"fp8\"", "fp8"),
        (
            "[[network.links]]\nlink = \"0 - 1\"\nlatency_us = 1.0",
            "0 - 1",
        ),
        ("bandwith_gbps = 1.0", "bandwith_gbps"),
    ] {
        let e = toml::from_str::<Doc>(&format!("[network]\n{bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{bad:?}: {e}");
    }
}
