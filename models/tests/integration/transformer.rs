//! The transformer language model and its text data: the batched gradient is each replica's
//! own and matches finite differences, attention is causal, the loss at initialization is that
//! of a uniform guess, and the text's windows, split and errors are what the book says.

use std::io::Write;
use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};
use dasim_models::NeuralNet;
use dasim_models::data::text::{Vocab, load_text};
use dasim_models::{
    BurnStore, DataConfig, Dataset, ModelConfig, Problem, TargetKind, Transformer, TransformerShape,
};
use dasim_sim::store::{OptimizerConfig, ReplicaStore};

/// A small real text: the first lines of Tiny Shakespeare, repeated with variations.
fn corpus() -> String {
    let verse = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n\
                 First Citizen:\nYou are all resolved rather to die than to famish?\n\n";
    (0..12)
        .map(|k| verse.replace("speak", &format!("speak{}", "!".repeat(k % 3))))
        .collect()
}

fn write_text(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    path
}

fn model_cfg(context: usize) -> ModelConfig {
    toml::from_str(&format!(
        "kind = \"transformer\"\nlayers = 2\nd_model = 16\nheads = 4\nd_ff = 24\ncontext = {context}"
    ))
    .unwrap()
}

fn text_cfg(path: &Path, extra: &str) -> DataConfig {
    toml::from_str(&format!(
        "dataset = \"text\"\npath = {:?}\n{extra}",
        path.display().to_string()
    ))
    .unwrap()
}

fn problem(dir: &Path, context: usize) -> Problem {
    let path = write_text(dir, "corpus.txt", &corpus());
    Problem::load(&model_cfg(context), &text_cfg(&path, ""), Path::new("."), 7).unwrap()
}

fn store(pb: &Problem, workers: usize, batch: usize) -> BurnStore {
    pb.store(
        Device::flex(),
        workers,
        batch,
        OptimizerConfig::default(),
        7,
    )
}

/// `r` distinct rows around the store's initial row.
fn distinct_rows(store: &BurnStore, r: usize) -> Vec<Vec<f32>> {
    let p = store.num_params();
    let init = store.params_host()[..p].to_vec();
    (0..r)
        .map(|k| {
            init.iter()
                .enumerate()
                .map(|(i, &v)| {
                    let t = (((i * 7 + k * 13) % 17) as f32 - 8.0) / 8.0;
                    v * (1.0 + 0.3 * t) + 0.02 * t
                })
                .collect()
        })
        .collect()
}

fn batches(r: usize, b: usize, len: usize) -> Vec<Vec<usize>> {
    (0..r)
        .map(|k| (0..b).map(|i| (k * 131 + i * 37) % len).collect())
        .collect()
}

#[test]
fn batched_gradient_is_each_replicas_own_gradient() {
    let dir = tempfile::tempdir().unwrap();
    let pb = problem(dir.path(), 12);
    let store = store(&pb, 3, 4);
    let len = pb.split.train.len();
    let rows = distinct_rows(&store, 3);
    let batches = batches(3, 4, len);
    let (together, losses) = store.gradients_host(&rows, &batches);
    let scale = together.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    for k in 0..3 {
        let (alone, loss) = store.gradients_host(&rows[k..=k], &batches[k..=k]);
        assert!(
            (losses[k] - loss[0]).abs() <= 1e-5 * loss[0].abs(),
            "replica {k}: loss {} batched, {} alone",
            losses[k],
            loss[0]
        );
        for (i, (a, b)) in together[k].iter().zip(&alone[0]).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * scale,
                "replica {k}, coordinate {i}: {a} batched vs {b} alone (scale {scale})"
            );
        }
    }
    assert_ne!(together[0], together[1], "replicas share no parameter");
}

#[test]
fn gradient_matches_finite_differences_in_every_block() {
    let dir = tempfile::tempdir().unwrap();
    let pb = problem(dir.path(), 8);
    let store = store(&pb, 1, 3);
    let x = distinct_rows(&store, 1);
    let batch = batches(1, 3, pb.split.train.len());
    let (g, _) = store.gradients_host(&x, &batch);
    let eps = 1e-2f32;
    let mut checked = 0;
    for block in pb.model.blocks() {
        // Three coordinates of every block: its first, middle and last.
        for i in [block.start, (block.start + block.end) / 2, block.end - 1] {
            let mut plus = x.clone();
            let mut minus = x.clone();
            plus[0][i] += eps;
            minus[0][i] -= eps;
            let fd = (store.losses_host(&plus, &batch)[0] - store.losses_host(&minus, &batch)[0])
                / (2.0 * eps);
            assert!(
                (fd - g[0][i]).abs() < 2e-3 + 2e-2 * g[0][i].abs(),
                "parameter {i} (block {block:?}): finite difference {fd}, gradient {}",
                g[0][i]
            );
            checked += 1;
        }
    }
    // wte, wpe, LN_f, and 12 blocks in each of the 2 transformer blocks.
    assert_eq!(checked, 3 * (2 + 2 + 2 * 12));
}

#[test]
fn attention_is_causal_and_the_head_is_tied() {
    let shape = TransformerShape {
        vocab: 11,
        context: 6,
        d_model: 8,
        heads: 2,
        d_ff: 16,
        layers: 2,
    };
    let m = Transformer::new(shape);
    let p = m.num_params();
    // No output matrix: wte is the only `vocab × d` block.
    // LN₁ 16, qkv 8·24 + 24, proj 8·8 + 8, LN₂ 16, fc₁ 8·16 + 16, fc₂ 16·8 + 8 per block.
    assert_eq!(
        p,
        11 * 8 + 6 * 8 + 2 * (16 + 216 + 72 + 16 + 144 + 136) + 16
    );
    let device = Device::flex();
    let params = m.init(&mut dasim_sim::clock::rng::stream(
        1,
        dasim_sim::clock::rng::StreamKind::Init,
        0,
    ));
    let params: Tensor<2> = Tensor::from_data(TensorData::new(params, [1, p]), &device);
    let window = |last: f32| -> Tensor<3> {
        let mut t = vec![3.0, 1.0, 4.0, 1.0, 5.0, 9.0];
        t.push(last);
        Tensor::from_data(TensorData::new(t, [1, 1, 7]), &device)
    };
    let a: Vec<f32> = m
        .forward(params.clone(), window(2.0))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    // The window's last token is only a target: the logits do not read it.
    let b: Vec<f32> = m
        .forward(params.clone(), window(7.0))
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(a, b);
    // Changing position 4's token changes the logits of positions 4 and 5 only.
    let mut t = vec![3.0f32, 1.0, 4.0, 1.0, 6.0, 9.0, 2.0];
    let c: Vec<f32> = m
        .forward(
            params,
            Tensor::from_data(TensorData::new(std::mem::take(&mut t), [1, 1, 7]), &device),
        )
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(
        a[..4 * 11],
        c[..4 * 11],
        "positions 0..4 see only their past"
    );
    assert_ne!(a[4 * 11..], c[4 * 11..]);
}

#[test]
fn loss_at_initialization_is_that_of_a_uniform_guess() {
    let dir = tempfile::tempdir().unwrap();
    let pb = problem(dir.path(), 16);
    let TargetKind::Tokens(vocab) = pb.split.train.target else {
        unreachable!()
    };
    let mut store = store(&pb, 2, 4);
    let eval = store.evaluate();
    let uniform = (vocab as f64).ln();
    // GPT-2's initialization makes the logits small: the held-out loss is ln(vocab) to within
    // a few hundredths of a nat per token, and the accuracy that of a guess.
    assert!(
        (eval.loss - uniform).abs() < 0.05,
        "loss {} against ln({vocab}) = {uniform}",
        eval.loss
    );
    assert!(eval.accuracy < 0.3, "{}", eval.accuracy);
}

#[test]
fn text_windows_view_one_token_stream() {
    let text = "hello, world";
    let vocab = Vocab::of(text);
    assert_eq!(vocab.len(), 9); // " ,dehlorw"
    let tokens = vocab.encode(text);
    assert_eq!(vocab.decode(&tokens), text);
    let d = Dataset::text(&tokens, 4, 1, vocab.len());
    assert_eq!(d.len(), text.len() - 3);
    assert_eq!(d.positions_per_sample(), 3);
    assert_eq!(vocab.decode(&to_ids(d.sample(2))), "llo,");
    let held = Dataset::text(&tokens, 4, 3, vocab.len());
    assert_eq!(held.len(), 3); // windows at 0, 3, 6 (9 would run past the end)
    assert_eq!(vocab.decode(&to_ids(held.sample(2))), " wor");
    let copy = held.subset(&[2, 0]);
    assert_eq!(copy.len(), 2);
    assert_eq!(vocab.decode(&to_ids(copy.sample(0))), " wor");
}

fn to_ids(window: &[f32]) -> Vec<u32> {
    window.iter().map(|&t| t as u32).collect()
}

#[test]
fn the_text_splits_at_its_last_tenth_and_every_held_out_token_is_predicted_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = corpus();
    let path = write_text(dir.path(), "t.txt", &text);
    let (split, vocab) = load_text(&path, 8, 0.1).unwrap();
    let n = text.chars().count();
    let test_len = (n as f64 * 0.1).round() as usize;
    assert_eq!(split.train.features.len(), n - test_len);
    assert_eq!(split.test.features.len(), test_len);
    assert_eq!(split.train.len(), n - test_len - 8);
    assert_eq!(split.test.len(), (test_len - 9) / 8 + 1);
    let train_text = vocab.decode(&to_ids(&split.train.features));
    assert!(text.starts_with(&train_text));
    // The default test fraction of a text is nanoGPT's 0.1.
    let data = text_cfg(&path, "");
    assert_eq!(data.test_fraction(), 0.1);
}

fn load_err(model: &ModelConfig, data: &DataConfig) -> String {
    match Problem::load(model, data, Path::new("."), 1) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("loaded"),
    }
}

#[test]
fn bad_text_and_bad_shapes_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write_text(dir.path(), "empty.txt", "");
    let short = write_text(dir.path(), "short.txt", "To be, or not to be");
    let good = write_text(dir.path(), "good.txt", &corpus());
    let e = load_err(&model_cfg(8), &text_cfg(&empty, ""));
    assert!(e.contains("empty.txt") && e.contains("empty"), "{e}");
    let e = load_err(&model_cfg(8), &text_cfg(&short, ""));
    assert!(
        e.contains("short.txt") && e.contains("shorter than one window of context + 1 = 9"),
        "{e}"
    );
    let e = load_err(&model_cfg(8), &text_cfg(&good, "context = 9"));
    assert!(
        e.contains("data.context") && e.contains("longer than the model's context of 8"),
        "{e}"
    );
    let e = load_err(&model_cfg(8), &DataConfig::default());
    assert!(e.contains("model.kind") && e.contains("needs text"), "{e}");
    let e = load_err(&ModelConfig::default(), &text_cfg(&good, ""));
    assert!(e.contains("model.kind") && e.contains("transformer"), "{e}");
    let bad_heads: ModelConfig =
        toml::from_str("kind = \"transformer\"\nd_model = 30\nheads = 4").unwrap();
    let e = load_err(&bad_heads, &text_cfg(&good, ""));
    assert!(
        e.contains("model.heads") && e.contains("do not divide"),
        "{e}"
    );
    let missing = dir.path().join("missing.txt");
    let e = load_err(&model_cfg(8), &text_cfg(&missing, ""));
    assert!(e.contains("missing.txt"), "{e}");
    let not_utf8 = dir.path().join("latin1.txt");
    std::fs::write(&not_utf8, b"caf\xe9 au lait, caf\xe9 au lait").unwrap();
    let e = load_err(&model_cfg(4), &text_cfg(&not_utf8, ""));
    assert!(e.contains("latin1.txt") && e.contains("not UTF-8"), "{e}");
    let e = match DataConfig::validate(&toml::from_str("context = 4").unwrap()) {
        Err(e) => e.to_string(),
        Ok(()) => panic!("accepted"),
    };
    assert!(e.contains("data.context"), "{e}");
}
