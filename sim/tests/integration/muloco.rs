//! MuLoCo (arXiv:2505.23725) on the exact reference store: every outer step is DiLoCo's
//! Nesterov step on the mean of the workers' quantized error-fed outer gradients, recomputed
//! here from the rows before it; the quantization error stays in each worker's accumulator;
//! without quantization it is DiLoCo's step; the bytes are the quantized messages'; the inner
//! optimizer must be Muon; bad options are refused at their field.

use crate::common;

use common::*;
use dasim_sim::algorithms::MulocoConfig;
use dasim_sim::engine::{Collect, run_inspect};
use dasim_sim::prelude::*;
use dasim_sim::store::OptimizerKind;

const SEED: u64 = 11;
const N: usize = 4;

/// After an event: the outer steps so far, the workers' rows, the global model, the outer
/// momentum and the workers' error rows.
type Snapshot = (u64, Vec<Vec<f64>>, Vec<f64>, Vec<f64>, Vec<Vec<f64>>);

/// Runs MuLoCo on `N` workers (worker 1 2× slower) for 1.5 s on the exact store with two
/// tensors of 8 (the quadratic has no matrix, so its inner optimizer here is momentum SGD: the
/// outer step is what is checked), calling `inspect` after every event.
fn run_muloco(cfg: &MulocoConfig, mut inspect: impl FnMut(&Diloco, Snapshot)) -> Outcome {
    let mut store = Checked::new(quadratic_store(N, SEED).with_tensors(vec![0..8, 8..16]));
    let shared = store.shared();
    let entry = AlgorithmConfig::from(AlgorithmKind::Muloco(cfg.clone()));
    let opt = optimizer(0.05, 0.0);
    let mut world = world(
        &entry,
        &cluster(N, &[(1, 2.0)]),
        &net(1.0, 20.0),
        TopologyConfig::Ring {},
        &mut store,
        &opt,
        SEED,
    );
    let mut alg = Diloco::compressed(&cfg.diloco(), N, cfg.compressor(), cfg.error_decay);
    run_inspect(
        &mut alg,
        &mut world,
        &stop_at(1.5),
        &mut Collect::default(),
        &mut |a: &Diloco, _: &World<'_>, _| {
            let store = shared.borrow();
            let errors = a.compressed_outer().map_or(0, |s| s.errors);
            let rows = |r: std::ops::Range<usize>| -> Vec<Vec<f64>> {
                r.map(|i| store.params(i).to_vec()).collect()
            };
            inspect(
                a,
                (
                    a.outer_steps(),
                    rows(0..N),
                    store.params(a.global_row()).to_vec(),
                    store.params(a.momentum_row()).to_vec(),
                    rows(errors..errors + N),
                ),
            );
        },
    )
    .unwrap()
}

fn small(bits: u32) -> MulocoConfig {
    MulocoConfig {
        inner_steps: 3,
        outer_lr: 0.7,
        outer_momentum: 0.9,
        error_decay: 0.95,
        bits: (bits > 0).then_some(bits),
        ..MulocoConfig::default()
    }
}

/// Every outer step, for every worker: `e ← β·e + (θ − θ_w)`, `ĉ = Q(e)`, `e ← e − ĉ`; then
/// `Δ = mean ĉ`, `m ← μm + Δ`, `θ ← θ − η(Δ + μm)`; every worker restarts from `θ`. At 2 and
/// 8 bits, and with the Top-k ablation.
#[test]
fn every_outer_step_is_nesterov_on_the_mean_of_the_quantized_error() {
    let top_k = MulocoConfig {
        chunk: 2,
        top_k: Some(1),
        ..small(2)
    };
    for cfg in [small(2), small(8), top_k] {
        let bits = cfg.bits.unwrap();
        let (beta, eta, mu) = (cfg.error_decay, cfg.outer_lr, cfg.outer_momentum);
        let mut before: Option<Snapshot> = None;
        let mut checked = 0;
        let mut quantization_error = 0.0f64;
        run_muloco(&cfg, |a, now| {
            if let Some((steps, workers, g0, m0, e0)) = &before
                && now.0 == steps + 1
            {
                let comp = a.compressed_outer().unwrap();
                let dim = g0.len();
                let mut delta = vec![0.0; dim];
                for w in 0..N {
                    let error: Vec<f64> = (0..dim)
                        .map(|j| beta * e0[w][j] + (g0[j] - workers[w][j]))
                        .collect();
                    let c = &comp.compressor;
                    let sent = reference_chunked(&error, c.chunk.min(8), c.top_k, c.bits, 6.0);
                    let kept: Vec<f64> = (0..dim).map(|j| error[j] - sent[j]).collect();
                    assert_close(
                        &now.4[w],
                        &kept,
                        &format!("bits {bits}: worker {w}'s error"),
                    );
                    quantization_error =
                        kept.iter().fold(quantization_error, |m, v| m.max(v.abs()));
                    (0..dim).for_each(|j| delta[j] += sent[j] / N as f64);
                }
                let m1: Vec<f64> = (0..dim).map(|j| mu * m0[j] + delta[j]).collect();
                let g1: Vec<f64> = (0..dim)
                    .map(|j| g0[j] - eta * (delta[j] + mu * m1[j]))
                    .collect();
                assert_close(&now.3, &m1, &format!("bits {bits}: outer momentum"));
                assert_close(&now.2, &g1, &format!("bits {bits}: global model"));
                for (w, x) in now.1.iter().enumerate() {
                    assert_eq!(x, &now.2, "worker {w} restarts from the global model");
                }
                checked += 1;
            }
            before = Some(now);
        });
        assert!(checked >= 5, "bits {bits}: {checked} outer steps checked");
        if bits == 2 {
            assert!(
                quantization_error > 1e-6,
                "2 bits lose something, which the errors keep"
            );
        }
    }
}

/// Without quantization and top-k there is nothing to feed back: MuLoCo is DiLoCo, with its
/// all-reduce: the same steps, bytes and models.
#[test]
fn without_quantization_it_is_diloco() {
    let cfg = small(0);
    let run = |entry: AlgorithmConfig| {
        let mut store = quadratic_store(N, SEED).with_tensors(vec![0..8, 8..16]);
        let (outcome, _) = run_on(
            &entry,
            &cluster(N, &[(1, 2.0)]),
            &net(1.0, 20.0),
            TopologyConfig::Ring {},
            &mut store,
            &stop_at(1.5),
            SEED,
        );
        (
            outcome,
            (0..N).map(|w| store.params(w).to_vec()).collect::<Vec<_>>(),
        )
    };
    // The quadratic has no matrix: its Muon steps every coordinate by its AdamW.
    let muon = OptimizerConfig {
        kind: OptimizerKind::Muon,
        ..optimizer(0.02, 0.95)
    };
    let (m, m_rows) =
        run(AlgorithmConfig::from(AlgorithmKind::Muloco(cfg.clone())).with_optimizer(muon.clone()));
    let (d, d_rows) =
        run(AlgorithmConfig::from(AlgorithmKind::Diloco(cfg.diloco())).with_optimizer(muon));
    assert_eq!(m.worker_steps, d.worker_steps);
    assert_eq!(m.network.bytes, d.network.bytes);
    assert_eq!(m.network.messages, d.network.messages);
    assert_eq!(m_rows, d_rows, "the same models, bit for bit");
    assert!(m.worker_steps > 5 * 3 * N as u64, "several rounds ran");
}

/// Every value is sent, quantized: `⌈8·2/8⌉ = 2` bytes per tensor of 8, plus the quantizer's
/// mean and 4 lookup values as `f32`, no positions: `2 · (2 + 20) = 44` bytes a message, and the
/// all-gather sends `n(n − 1)` of them per outer step.
#[test]
fn the_all_gather_carries_the_quantized_size() {
    let cfg = small(2);
    let mut rounds = 0;
    let outcome = run_muloco(&cfg, |a, _| rounds = a.outer_steps());
    let per_round = (N * (N - 1)) as u64 * 44;
    assert!(rounds >= 5, "{rounds} rounds");
    assert!(
        outcome.network.bytes == rounds * per_round
            || outcome.network.bytes == (rounds + 1) * per_round,
        "{} bytes for {rounds} rounds of {per_round}",
        outcome.network.bytes
    );
    assert_eq!(outcome.network.messages * 44, outcome.network.bytes);
}

/// The inner optimizer must be Muon, the entry's or the scenario's: another is refused at
/// `optimizer.kind` with a hint that says how.
#[test]
fn the_inner_optimizer_must_be_muon() {
    let entry: AlgorithmConfig = toml::from_str("kind = \"muloco\"").unwrap();
    for kind in [OptimizerKind::Sgd, OptimizerKind::AdamW] {
        let opt = OptimizerConfig {
            kind,
            ..optimizer(0.01, 0.0)
        };
        let e = entry.check_optimizer(&opt, "optimizer").unwrap_err();
        assert_eq!(e.path.to_string(), "optimizer.kind", "{e}");
        assert!(e.to_string().contains("Muon"), "{e}");
        assert!(e.hint.as_deref().unwrap().contains("\"muon\""), "{e}");
    }
    let muon = OptimizerConfig {
        kind: OptimizerKind::Muon,
        ..optimizer(0.02, 0.95)
    };
    entry.check_optimizer(&muon, "optimizer").unwrap();
}

/// Bad options are refused at their field, with a hint.
#[test]
fn bad_options_are_refused_at_their_field() {
    let topology = Topology::build(&TopologyConfig::Ring {}, 4, &BuildEnv::new(1)).unwrap();
    for (options, field) in [
        ("inner_steps = 0", "inner_steps"),
        ("outer_momentum = 1.0", "outer_momentum"),
        ("bits = 3", "bits"),
        ("error_decay = -0.5", "error_decay"),
        ("range_sigmas = -1.0", "range_sigmas"),
        ("top_k = 0", "top_k"),
        ("chunk = 2\ntop_k = 5", "top_k"),
        ("chunk = 0", "chunk"),
    ] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"muloco\"\n{options}"))
            .unwrap_or_else(|e| panic!("{options}: {e}"));
        let err = entry
            .validate(&topology, "algorithms[0]", None)
            .expect_err(options);
        assert_eq!(err.path.to_string(), format!("algorithms[0].{field}"));
        assert!(err.hint.is_some(), "{options}: {err}");
    }
    for ok in ["", "bits = 0", "top_k = 32", "error_decay = 0.999"] {
        let entry: AlgorithmConfig = toml::from_str(&format!("kind = \"muloco\"\n{ok}")).unwrap();
        entry.validate(&topology, "algorithms[0]", None).unwrap();
    }
}
