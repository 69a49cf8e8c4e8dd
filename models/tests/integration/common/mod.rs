//! What the tests of the CPU programs share.

use dasim_models::Model;

/// Every block of every row within `rel` of the reference's largest magnitude in that block.
pub fn assert_close(model: &Model, got: &[Vec<f32>], want: &[Vec<f32>], rel: f32, what: &str) {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        for block in model.blocks() {
            let (g, w) = (&g[block.clone()], &w[block.clone()]);
            let scale = w.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
            let worst = g
                .iter()
                .zip(w)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= rel * scale && g.iter().all(|v| v.is_finite()),
                "{what}, replica {k}, block {block:?}: off by {worst:e} of {scale:e}"
            );
        }
    }
}
