//! The gradient pass and the evaluation through a model's own CPU program ([`CpuNet`]), on
//! the host rows, without burn.

use super::*;

impl BurnStore {
    /// The gradient of the row `row` read at `scale` on the minibatch `batch` (training
    /// indices, or the augmented `features` when there are any) through the model's CPU
    /// program, into `grad` (`P`), with the state delta on the state suffix as
    /// [`BurnStore::batched_gradient`]'s; returns the minibatch's mean loss. The minibatch is
    /// gathered into this thread's scratch buffers.
    pub(super) fn cpu_gradient(
        &self,
        cpu: &dyn CpuNet,
        row: &[f32],
        scale: f64,
        batch: &[usize],
        features: Option<&[f32]>,
        grad: &mut [f32],
    ) -> f32 {
        thread_local! {
            static SCRATCH: std::cell::RefCell<CpuScratch> = Default::default();
        }
        let train = self.train.host();
        let dim = train.dim;
        SCRATCH.with(|scratch| {
            let CpuScratch {
                params,
                x,
                labels,
                values,
            } = &mut *scratch.borrow_mut();
            let params: &[f32] = if scale == 1.0 {
                row
            } else {
                let s = scale as f32;
                params.clear();
                params.extend(row.iter().map(|&v| v * s));
                params
            };
            x.clear();
            match features {
                Some(f) => x.extend_from_slice(f),
                None => {
                    for &i in batch {
                        x.extend_from_slice(train.sample(i));
                    }
                }
            }
            let targets = match train.target {
                TargetKind::Tokens(_) => {
                    // Every position's target is the window's next token.
                    labels.clear();
                    for window in x.chunks(dim) {
                        labels.extend(window[1..].iter().map(|&t| t as u32));
                    }
                    HostTargets::Tokens(labels)
                }
                TargetKind::Classes(_) => {
                    labels.clear();
                    labels.extend(batch.iter().map(|&i| train.labels[i]));
                    HostTargets::Classes(labels)
                }
                TargetKind::Real => {
                    values.clear();
                    values.extend(batch.iter().map(|&i| train.values[i]));
                    HostTargets::Real(values)
                }
            };
            let b = batch.len();
            let per_sample = cpu.train(params, x, targets, 1.0 / b as f32, grad);
            // The state part holds the new state: its change from the state read.
            for k in self.model.trainable().end..self.model.num_params() {
                grad[k] -= params[k];
            }
            let sum: f64 = per_sample.iter().map(|&l| f64::from(l)).sum();
            (sum / b as f64) as f32
        })
    }

    /// Held-out loss and accuracy of `model` on the CPU path: the test split in chunks of a
    /// minibatch's size (spread over the store's threads; each reuses its thread's buffers of
    /// a training pass), each sample's (or a text's each position's) loss summed in order in
    /// `f64`.
    pub(super) fn cpu_evaluate(&self, cpu: &dyn CpuNet, model: &[f32]) -> Evaluation {
        let test = self.test.host();
        let n = test.len();
        let k = cpu.outputs();
        // A text's windows predict `window − 1` positions each, every one scored.
        let positions = test.positions_per_sample();
        let chunk = |range: Range<usize>| -> Vec<(f64, bool)> {
            let mut x = Vec::with_capacity(self.batch * test.dim);
            for i in range.clone() {
                x.extend_from_slice(test.sample(i));
            }
            // The last chunk is padded with zero samples to a whole minibatch, so that it runs
            // on the same buffers; evaluation treats each sample on its own.
            x.resize(self.batch * test.dim, 0.0);
            if let TargetKind::Tokens(_) = test.target {
                let labels: Vec<u32> = x
                    .chunks(test.dim)
                    .flat_map(|w| w[1..].iter().map(|&t| t as u32))
                    .collect();
                if let Some(scored) = cpu.infer_scored(model, &x, self.batch, &labels) {
                    return scored[..range.len() * positions]
                        .iter()
                        .map(|&(l, c)| (f64::from(l), c))
                        .collect();
                }
            }
            let mut out = vec![0.0f32; self.batch * positions * k];
            cpu.infer(model, &x, self.batch, &mut out);
            let mut scored = Vec::with_capacity(range.len() * positions);
            for (j, i) in range.enumerate() {
                for t in 0..positions {
                    let at = (j * positions + t) * k;
                    let o = &out[at..at + k];
                    let label = match test.target {
                        TargetKind::Classes(_) => test.labels[i] as usize,
                        TargetKind::Tokens(_) => x[j * test.dim + t + 1] as usize,
                        TargetKind::Real => {
                            let e = f64::from(o[0]) - f64::from(test.values[i]);
                            scored.push((0.5 * e * e, false));
                            continue;
                        }
                    };
                    let max = o.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let log_sum = o.iter().map(|&v| (v - max).exp()).sum::<f32>().ln() + max;
                    let best = o
                        .iter()
                        .enumerate()
                        .fold(0, |b, (c, &v)| if v > o[b] { c } else { b });
                    scored.push((f64::from(log_sum - o[label]), best == label));
                }
            }
            scored
        };
        let ranges: Vec<Range<usize>> = (0..n)
            .step_by(self.batch)
            .map(|s| s..(s + self.batch).min(n))
            .collect();
        let parts: Vec<Vec<(f64, bool)>> = if self.threads > 1 && ranges.len() > 1 {
            ranges
                .into_par_iter()
                .map(|r| with_inner_parallelism(false, || chunk(r)))
                .collect()
        } else {
            ranges.into_iter().map(chunk).collect()
        };
        let (mut loss, mut correct) = (0.0f64, 0usize);
        for (l, c) in parts.into_iter().flatten() {
            loss += l;
            correct += usize::from(c);
        }
        let scored = (n * positions) as f64;
        Evaluation {
            loss: loss / scored,
            accuracy: match test.target {
                TargetKind::Classes(_) | TargetKind::Tokens(_) => correct as f64 / scored,
                TargetKind::Real => f64::NAN,
            },
        }
    }
}
