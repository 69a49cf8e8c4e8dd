//! The transformer's CPU program (row-major activations, gemm's products, fused layer norm,
//! causal softmax, GELU and embeddings; what the store runs on `flex`) against burn's autodiff
//! of the same model, the reference: gradients and losses within 1e-5 relative at 1, 3 and 16
//! replicas, on windows shorter than the context too; the logits of an evaluation; the same bits
//! on one thread and on two; and whole stores (SGD with momentum and clipping, AdamW) that step
//! alike through either pass.

use crate::common;

use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData, activation};
use dasim_models::layers::Targets;
use dasim_models::{DataConfig, Model, ModelConfig, Problem, Transformer, TransformerShape};
use dasim_sim::clock::rng::{StreamKind, stream};
use dasim_sim::store::{OptimizerConfig, ReplicaStore};
use rand::Rng;

use common::assert_close;

fn shape(
    vocab: usize,
    context: usize,
    d_model: usize,
    heads: usize,
    d_ff: usize,
) -> TransformerShape {
    TransformerShape {
        vocab,
        context,
        d_model,
        heads,
        d_ff,
        layers: 2,
    }
}

/// `r` rows around the model's initialization: every coordinate moved by up to ±0.05 (a
/// different move per row), the layer-norm gains off 1 and the biases off 0.
fn rows(model: &Model, r: usize) -> Vec<Vec<f32>> {
    let init = model.init(&mut stream(3, StreamKind::Init, 0));
    (0..r as u64)
        .map(|k| {
            let mut rng = stream(100 + k, StreamKind::Algorithm, 9);
            init.iter()
                .map(|&v| v * 3.0 + rng.random_range(-0.05f32..0.05))
                .collect()
        })
        .collect()
}

/// `r · b` windows of `t + 1` random tokens, as floats.
fn windows(vocab: usize, r: usize, b: usize, t: usize) -> Vec<f32> {
    let mut rng = stream(5, StreamKind::Algorithm, 1);
    (0..r * b * (t + 1))
        .map(|_| rng.random_range(0..vocab as u32) as f32)
        .collect()
}

/// The next token of every position of every window.
fn next_tokens(x: &[f32], t: usize) -> Vec<u32> {
    x.chunks(t + 1)
        .flat_map(|w| w[1..].iter().map(|&v| v as u32))
        .collect()
}

/// burn's gradients and per-replica mean losses (over all positions) on flex.
fn reference(
    model: &Model,
    rows: &[Vec<f32>],
    x: &[f32],
    b: usize,
    t: usize,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let device = Device::flex();
    let (r, p) = (rows.len(), rows[0].len());
    let params = Tensor::<2>::from_data(TensorData::new(rows.concat(), [r, p]), &device)
        .autodiff()
        .require_grad();
    let xt = Tensor::<3>::from_data(TensorData::new(x.to_vec(), [r, b, t + 1]), &device).autodiff();
    let y: Vec<i64> = next_tokens(x, t).iter().map(|&v| i64::from(v)).collect();
    let y = Tensor::<3, Int>::from_data(TensorData::new(y, [r, b * t, 1]), &device).autodiff();
    let (logits, _) = model.forward(params.clone(), xt, true);
    let losses = activation::log_softmax(logits, 2)
        .gather(2, y)
        .neg()
        .sum_dim(1)
        .reshape([r])
        .div_scalar((b * t) as f64);
    let grads = losses.clone().sum().backward();
    let g: Vec<f32> = params
        .grad(&grads)
        .unwrap()
        .into_data()
        .try_into_vec()
        .unwrap();
    let losses = losses
        .without_autodiff()
        .into_data()
        .try_into_vec()
        .unwrap();
    (g.chunks(p).map(<[f32]>::to_vec).collect(), losses)
}

/// The CPU program's gradients and mean losses, replica by replica.
fn cpu(
    model: &Model,
    rows: &[Vec<f32>],
    x: &[f32],
    b: usize,
    t: usize,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let program = model
        .cpu_program()
        .expect("the transformer has a CPU program");
    let per = b * (t + 1);
    rows.iter()
        .enumerate()
        .map(|(k, row)| {
            let x = &x[k * per..(k + 1) * per];
            let targets = next_tokens(x, t);
            let mut g = vec![f32::NAN; row.len()];
            let l = program.train(row, x, Targets::Tokens(&targets), 1.0 / b as f32, &mut g);
            assert_eq!(l.len(), b, "one loss per window");
            (g, l.iter().sum::<f32>() / b as f32)
        })
        .unzip()
}

fn check(s: TransformerShape, cases: &[(usize, usize, usize)], what: &str) {
    let model = Model::net(Transformer::new(s));
    for &(r, b, t) in cases {
        let rows = rows(&model, r);
        let x = windows(s.vocab, r, b, t);
        let (want, want_losses) = reference(&model, &rows, &x, b, t);
        let (got, got_losses) = cpu(&model, &rows, &x, b, t);
        let what = format!("{what}, R = {r}, B = {b}, T = {t}");
        assert_close(&model, &got, &want, 1e-5, &what);
        for (a, w) in got_losses.iter().zip(&want_losses) {
            assert!((a - w).abs() <= 1e-5 * w.abs(), "{what}: loss {a} vs {w}");
        }
    }
}

#[test]
fn gradients_equal_burns_at_one_three_and_sixteen_replicas() {
    check(
        shape(11, 12, 16, 4, 24),
        &[(1, 3, 12), (3, 2, 12), (16, 2, 7)],
        "d = 16, 4 heads",
    );
}

#[test]
fn gradients_equal_burns_on_one_head_and_a_window_of_one() {
    // One head of all the features, d_ff narrower than d, and windows of one position (the
    // causal softmax of a single score) beside windows of the whole context.
    check(
        shape(7, 5, 6, 1, 4),
        &[(2, 4, 1), (2, 3, 5)],
        "d = 6, one head",
    );
}

#[test]
fn inference_equals_burns_logits() {
    let s = shape(13, 10, 12, 3, 20);
    let model = Model::net(Transformer::new(s));
    let row = rows(&model, 1).remove(0);
    let (b, t) = (5, 9);
    let x = windows(s.vocab, 1, b, t);
    let device = Device::flex();
    let p = row.len();
    let want: Vec<f32> = model
        .forward(
            Tensor::<2>::from_data(TensorData::new(row.clone(), [1, p]), &device),
            Tensor::<3>::from_data(TensorData::new(x.clone(), [1, b, t + 1]), &device),
            false,
        )
        .0
        .into_data()
        .try_into_vec()
        .unwrap();
    let mut got = vec![f32::NAN; b * t * s.vocab];
    model.cpu_program().unwrap().infer(&row, &x, b, &mut got);
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, w)) in got.iter().zip(&want).enumerate() {
        assert!((a - w).abs() <= 1e-5 * scale, "logit {i}: {a} vs {w}");
    }
}

#[test]
fn a_pass_spread_over_two_threads_gives_the_same_bits() {
    // Wide enough that the products split (more than 2¹⁸ multiply-adds each).
    let s = TransformerShape {
        layers: 1,
        ..shape(17, 32, 64, 4, 192)
    };
    let model = Model::net(Transformer::new(s));
    let row = rows(&model, 1).remove(0);
    let (b, t) = (6, 32);
    let x = windows(s.vocab, 1, b, t);
    let targets = next_tokens(&x, t);
    let program = model.cpu_program().unwrap();
    let pass = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut g = vec![0.0f32; row.len()];
            let l = program.train(&row, &x, Targets::Tokens(&targets), 1.0 / b as f32, &mut g);
            (g, l)
        })
    };
    let (one, l1) = pass(1);
    let (two, l2) = pass(2);
    assert_eq!(l1, l2, "losses");
    let differ = one
        .iter()
        .zip(&two)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(
        differ, 0,
        "{differ} gradient coordinates differ between one and two threads"
    );
}

/// A store on a small text, through the CPU program or burn's pass.
fn store(dir: &Path, optimizer: &str, reference: bool) -> dasim_models::BurnStore {
    let model: ModelConfig = toml::from_str(
        "kind = \"transformer\"\nlayers = 2\nd_model = 16\nheads = 2\nd_ff = 40\ncontext = 16",
    )
    .unwrap();
    let verse = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n\
                 Speak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n";
    let path = dir.join("text.txt");
    std::fs::write(&path, verse.repeat(30)).unwrap();
    let data: DataConfig = toml::from_str(&format!(
        "dataset = \"text\"\npath = {:?}",
        path.display().to_string()
    ))
    .unwrap();
    let pb = Problem::load(&model, &data, Path::new("."), 1).unwrap();
    let optimizer: OptimizerConfig = toml::from_str(optimizer).unwrap();
    let store = pb.store(Device::flex(), 3, 4, optimizer, 1);
    if reference {
        store.with_reference_pass()
    } else {
        store
    }
}

#[test]
fn stores_step_alike_through_either_pass_with_sgd_clipping_and_adamw() {
    let dir = tempfile::tempdir().unwrap();
    for (optimizer, lr) in [
        ("lr = 0.5\nmomentum = 0.9\nclip_norm = 0.5", 0.5),
        ("lr = 0.3\nmomentum = 0.9", 0.3),
        ("kind = \"adamw\"\nlr = 0.01\nweight_decay = 0.1", 0.01),
    ] {
        let mut cpu = store(dir.path(), optimizer, false);
        let mut burn = store(dir.path(), optimizer, true);
        for _ in 0..4 {
            for s in [&mut cpu, &mut burn] {
                for w in 0..3 {
                    let g = s.request_gradient(w);
                    s.apply_gradient(w, g, lr);
                    s.release_gradient(g);
                }
            }
        }
        let (a, b) = (cpu.params_host(), burn.params_host());
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-4 * scale,
            "{optimizer}: rows differ by {worst:e} of {scale:e}"
        );
        assert_ne!(
            a,
            store(dir.path(), optimizer, false).params_host(),
            "the rows moved"
        );
        let (ea, eb) = (cpu.evaluate(), burn.evaluate());
        assert!(
            (ea.loss - eb.loss).abs() <= 1e-5 * eb.loss && (ea.accuracy - eb.accuracy).abs() < 1e-3,
            "{optimizer}: held-out {ea:?} vs {eb:?}"
        );
    }
}
