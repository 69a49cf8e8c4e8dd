//! Batch-norm state in the store (a ResNet-8 on the digits): gradients carry the running-statistics
//! delta on the state suffix, applying one to the row that computed it adds it as it is (no
//! rate, momentum or weight decay) and to any other row leaves that row's state alone, averaging
//! and `mean_gradient` treat it like parameters, and evaluation uses it.

use std::path::Path;

use burn::tensor::Device;
use dasim_models::{BurnStore, DataConfig, ModelConfig, Problem, ResnetConfig};
use dasim_sim::store::{OptimizerConfig, ReplicaStore, Slot};

fn store(workers: usize, optimizer: OptimizerConfig) -> (BurnStore, usize, usize) {
    let model = ModelConfig::Resnet(ResnetConfig { depth: 8, width: 4 });
    let pb = Problem::load(&model, &DataConfig::default(), Path::new("."), 5).unwrap();
    let p = pb.model.num_params();
    let s = pb.model.state_len();
    assert!(s > 0 && s < p);
    (pb.store(Device::flex(), workers, 16, optimizer, 5), p, s)
}

fn row(store: &BurnStore, r: usize) -> Vec<f32> {
    let p = store.num_params();
    store.params_host()[r * p..(r + 1) * p].to_vec()
}

fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn applying_a_gradient_adds_the_state_delta_and_optimizes_only_the_prefix() {
    let opt = OptimizerConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.01,
        ..Default::default()
    };
    let (mut st, p, s) = store(3, opt);
    let t = p - s;
    let x0 = row(&st, 0);
    let id = st.request_gradient(0);
    let g = st.gradient_host(id);
    let delta = &g[t..];
    assert!(
        delta.iter().any(|d| d.abs() > 1e-4),
        "the running stats moved"
    );

    // Row 0, which computed it: the state gets Δ; the prefix one SGD step with weight decay
    // (the momentum buffer starts at zero, so the first step is the plain one).
    st.apply_gradient(0, id, 0.1);
    let x1 = row(&st, 0);
    let want_state: Vec<f32> = x0[t..].iter().zip(delta).map(|(x, d)| x + d).collect();
    close(&x1[t..], &want_state, 1e-6, "state after one application");
    let want_prefix: Vec<f32> = x0[..t]
        .iter()
        .zip(&g[..t])
        .map(|(x, g)| x - 0.1 * (g + 0.01 * x))
        .collect();
    close(&x1[..t], &want_prefix, 1e-5, "parameters after one step");

    // Row 1 did not compute it: the same prefix step, and its state stays as it was.
    st.apply_gradient(1, id, 0.1);
    let other = row(&st, 1);
    assert_eq!(&other[..t], &x1[..t]);
    assert_eq!(&other[t..], &x0[t..]);

    // Again: momentum shapes the prefix's second step, but the state just adds Δ once more.
    st.apply_gradient(0, id, 0.1);
    let x1 = row(&st, 0);
    let want_state: Vec<f32> = want_state.iter().zip(delta).map(|(x, d)| x + d).collect();
    close(&x1[t..], &want_state, 1e-6, "state after two applications");

    // With a zero rate only the state moves (worker 2's own gradient on its row).
    let id = st.request_gradient(2);
    let g = st.gradient_host(id);
    let delta = &g[t..];
    st.apply_gradient(2, id, 0.0);
    let x2 = row(&st, 2);
    assert_eq!(&x2[..t], &x0[..t]);
    close(
        &x2[t..],
        &x0[t..]
            .iter()
            .zip(delta)
            .map(|(x, d)| x + d)
            .collect::<Vec<_>>(),
        1e-6,
        "state",
    );

    // A block that straddles the boundary: the optimizer on its prefix part, Δ on its state
    // part; nothing outside the block moves.
    let (mut st, _, _) = store(2, OptimizerConfig::default());
    let id = st.request_gradient(1);
    let g = st.gradient_host(id);
    let block = t - 5..t + 7;
    st.apply_gradient_block(1, id, 0.5, block.clone());
    let x = row(&st, 1);
    for k in 0..p {
        let want = if block.contains(&k) {
            if k < t {
                x0[k] - 0.5 * g[k]
            } else {
                x0[k] + g[k]
            }
        } else {
            x0[k]
        };
        assert!(
            (x[k] - want).abs() <= 1e-6 * (1.0 + want.abs()),
            "coordinate {k}"
        );
    }
}

#[test]
fn averaging_and_mixing_treat_the_state_like_parameters() {
    let (mut st, p, s) = store(3, OptimizerConfig::default());
    let t = p - s;
    // Give rows 0 and 1 different running statistics (and parameters).
    let a = st.request_gradient(0);
    let b = st.request_gradient(1);
    st.apply_gradient(0, a, 0.1);
    st.apply_gradient(1, b, 0.1);
    let (r0, r1) = (row(&st, 0), row(&st, 1));
    assert_ne!(&r0[t..], &r1[t..]);
    st.average(&[0, 1]);
    let mean: Vec<f32> = r0.iter().zip(&r1).map(|(x, y)| (x + y) / 2.0).collect();
    close(&row(&st, 0), &mean, 1e-6, "averaged row");
    assert_eq!(row(&st, 0), row(&st, 1));
    // A message carries the state too.
    let m = st.new_msg(&[(Slot::Row(0), 1.0)]);
    st.mix(2, &[(Slot::Msg(m), 1.0)]);
    assert_eq!(row(&st, 2), row(&st, 0));
}

#[test]
fn a_mean_gradient_averages_the_deltas_and_keeps_equal_rows_equal() {
    let (mut st, p, s) = store(4, OptimizerConfig::default());
    let t = p - s;
    let x0 = row(&st, 0);
    let ids: Vec<_> = (0..4).map(|w| st.request_gradient(w)).collect();
    let batches: Vec<Vec<usize>> = (0..4).map(|k| st.pending_batch_host(k).0).collect();
    let mean = st.mean_gradient(&ids);
    for w in 0..4 {
        st.apply_gradient(w, mean, 0.1);
    }
    let rows: Vec<Vec<f32>> = (0..4).map(|w| row(&st, w)).collect();
    for w in 1..4 {
        assert_eq!(
            rows[w], rows[0],
            "all-reduce keeps replica {w} equal, state included"
        );
    }
    // The state moved by the mean of the four deltas.
    let (g, _) = st.gradients_host(&vec![x0.clone(); 4], &batches);
    let want: Vec<f32> = (t..p)
        .map(|k| x0[k] + (g[0][k] + g[1][k] + g[2][k] + g[3][k]) / 4.0)
        .collect();
    close(&rows[0][t..], &want, 1e-5, "state after the mean delta");
    assert_ne!(&rows[0][t..], &x0[t..]);
}

#[test]
fn evaluation_uses_the_running_statistics() {
    let (mut st, p, s) = store(2, OptimizerConfig::default());
    let t = p - s;
    let before = st.evaluate();
    assert_eq!(st.evaluate(), before, "evaluation is deterministic");
    // Move only the running statistics of both rows (zero rate): the held-out numbers change.
    for _ in 0..5 {
        let a = st.request_gradient(0);
        let b = st.request_gradient(1);
        st.apply_gradient(0, a, 0.0);
        st.apply_gradient(1, b, 0.0);
    }
    let (r0, x0) = (
        row(&st, 0),
        store(1, OptimizerConfig::default()).0.params_host(),
    );
    assert_eq!(&r0[..t], &x0[..t], "parameters unchanged");
    let after = st.evaluate();
    assert!(
        (after.loss - before.loss).abs() > 1e-4,
        "{before:?} vs {after:?}"
    );
    assert!(after.loss.is_finite() && after.accuracy >= 0.0);
}
