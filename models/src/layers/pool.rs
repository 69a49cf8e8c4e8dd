//! Max pooling over 2×2 windows of stride 2 on the CPU path, one plane at a time. The forward
//! pass records which of its four values each window took (the first maximum, in row-major
//! order, as burn's pooling), so that the backward pass routes each gradient without comparing
//! again.

use super::cpu::Geom;

/// The pooled size of a map: `⌊h/2⌋ × ⌊w/2⌋`.
pub(crate) fn pooled([h, w]: [usize; 2]) -> [usize; 2] {
    [h / 2, w / 2]
}

/// Pools the interior of `z` (a plane of geometry `g`): `put(y, x, max)` for every window, and
/// `args[y·pw + x]` the window's position of its maximum (0 to 3, row-major).
pub(crate) fn pool_plane(
    z: &[f32],
    g: Geom,
    args: &mut [u8],
    mut put: impl FnMut(usize, usize, f32),
) {
    let [ph, pw] = pooled([g.h, g.w]);
    debug_assert!(args.len() >= ph * pw);
    for y in 0..ph {
        let r0 = &z[g.at(2 * y, 0)..g.at(2 * y, 0) + 2 * pw];
        let r1 = &z[g.at(2 * y + 1, 0)..g.at(2 * y + 1, 0) + 2 * pw];
        let arg = &mut args[y * pw..(y + 1) * pw];
        for (x, ((a0, a1), arg)) in r0
            .chunks_exact(2)
            .zip(r1.chunks_exact(2))
            .zip(arg.iter_mut())
            .enumerate()
        {
            let (mut best, mut at) = (a0[0], 0u8);
            for (k, v) in [(1u8, a0[1]), (2, a1[0]), (3, a1[1])] {
                if v > best {
                    best = v;
                    at = k;
                }
            }
            *arg = at;
            put(y, x, best);
        }
    }
}

/// The adjoint of [`pool_plane`]: writes `grad(y, x)` at each window's recorded maximum of
/// `dz` (a plane of geometry `g`, whose other positions the caller has zeroed).
pub(crate) fn unpool_plane(
    g: Geom,
    args: &[u8],
    grad: impl Fn(usize, usize) -> f32,
    dz: &mut [f32],
) {
    let [ph, pw] = pooled([g.h, g.w]);
    for y in 0..ph {
        for x in 0..pw {
            let a = usize::from(args[y * pw + x]);
            dz[g.at(2 * y + a / 2, 2 * x + a % 2)] = grad(y, x);
        }
    }
}
