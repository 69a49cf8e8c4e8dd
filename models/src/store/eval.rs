//! Held-out evaluation of a model (an average of rows, or one row) and the convex models'
//! objective on the host.

use super::*;

impl BurnStore {
    /// `f*`, the minimum of the training objective, for the convex models where it is known
    /// (see [`crate::convex`]); computed on first use.
    pub fn optimum(&self) -> Option<f64> {
        self.objective.as_ref()?.optimum().map(|o| o.value)
    }

    /// The training objective `f` (mean training loss plus the L2 term, in `f64` on the host)
    /// of the model `Σ weight · row` over `terms`, or of the average of the worker rows for
    /// `None`; `None` for models without a convex objective.
    pub fn objective(&mut self, terms: Option<&[(usize, f64)]>) -> Option<f64> {
        let theta = self.model_host(terms, self.objective.is_some())?;
        Some(self.objective.as_ref()?.value(&theta))
    }

    pub(super) fn model_host(
        &mut self,
        terms: Option<&[(usize, f64)]>,
        wanted: bool,
    ) -> Option<Vec<f64>> {
        if !wanted {
            return None;
        }
        let model = match terms {
            Some(terms) => {
                let terms: Vec<(Slot, f64)> =
                    terms.iter().map(|&(r, w)| (Slot::Row(r), w)).collect();
                self.settle(&terms);
                self.combine(&terms)
            }
            None => self.mean_of_workers(),
        };
        Some(model.into_iter().map(f64::from).collect())
    }

    /// Held-out loss and accuracy (NaN for real targets) of one model `[1, params]`, the test
    /// split run in chunks of [`EVAL_CHUNK`] with the running statistics, read back in one
    /// transfer.
    pub(super) fn evaluate_model(&mut self, model: Vec<f32>) -> Evaluation {
        let started = Instant::now();
        self.stats.evaluations += 1;
        if let Some(cpu) = &self.cpu {
            let evaluation = self.cpu_evaluate(&**cpu, &model);
            self.stats.eval_wall += started.elapsed();
            return evaluation;
        }
        let p = model.len();
        let model: Tensor<2> = Tensor::from_data(TensorData::new(model, [1, p]), &self.device);
        let n = self.test.len();
        let mut loss_sum: Option<Tensor<1>> = None;
        let mut correct: Option<Tensor<1>> = None;
        let add = |acc: &mut Option<Tensor<1>>, t: Tensor<1>| {
            *acc = Some(match acc.take() {
                Some(a) => a + t,
                None => t,
            });
        };
        for start in (0..n).step_by(EVAL_CHUNK) {
            let (x, y) = self.test.device().rows(start..(start + EVAL_CHUNK).min(n));
            let (out, _) = self.model.forward(model.clone(), x, false);
            match y {
                BatchTargets::Classes(y) => {
                    let logp = activation::log_softmax(out, 2);
                    add(&mut loss_sum, logp.clone().gather(2, y.clone()).neg().sum());
                    add(&mut correct, logp.argmax(2).equal(y).float().sum());
                }
                BatchTargets::Real(y) => {
                    let b = y.dims()[1];
                    let sq = (out.reshape([1, b]) - y).square().sum().mul_scalar(0.5);
                    add(&mut loss_sum, sq);
                }
            }
        }
        let loss_sum = loss_sum.expect("the test split has at least one sample");
        let sums = match correct {
            Some(c) => Tensor::cat(vec![loss_sum, c], 0),
            None => loss_sum,
        };
        let sums = sums.into_data().try_into_vec::<f32>().expect("f32 metrics");
        self.stats.eval_wall += started.elapsed();
        // A text's loss and accuracy are per predicted token: `window − 1` per window.
        let positions = n * self.test.device().windows.map_or(1, |(_, w)| w - 1);
        Evaluation {
            loss: f64::from(sums[0]) / positions as f64,
            accuracy: sums
                .get(1)
                .map_or(f64::NAN, |&c| f64::from(c) / positions as f64),
        }
    }
}
