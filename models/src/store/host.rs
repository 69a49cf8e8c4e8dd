//! Host views of the store for tests, benchmarks and algorithms: rows, gradients and
//! minibatches read back, and the combinations of slots.

use super::*;

impl BurnStore {
    /// Parameter buffers alive (rows, snapshots of pending requests, messages, gradients), in
    /// floats: what the store holds on the host now. Rows shared between a snapshot and its row
    /// count once.
    pub fn floats_held(&mut self) -> usize {
        self.rows.settle_all();
        let mut seen = std::collections::BTreeSet::new();
        let mut floats = 0;
        let mut count = |ptr: *const f32, len: usize| {
            if seen.insert(ptr as usize) {
                floats += len;
            }
        };
        for r in 0..self.rows.len() {
            count(self.rows.get(r).as_ptr(), self.rows.width());
        }
        for p in &self.pending {
            count(p.snapshot.as_ptr(), p.snapshot.len());
        }
        for m in self.msgs.values() {
            count(m.as_ptr(), m.len());
        }
        for g in self.ready.values() {
            match g {
                Ready::Host(g) => count(g.as_ptr(), g.len()),
                Ready::Read(read, _) => {
                    for (_, data) in &read.parts {
                        let data = data.as_slice::<f32>().expect("f32 gradients");
                        count(data.as_ptr(), data.len());
                    }
                }
            }
        }
        floats
    }

    /// All replicas, read back to the host (row-major `[workers, params]`).
    pub fn params_host(&self) -> Vec<f32> {
        (0..self.rows.len())
            .flat_map(|r| self.rows.value(r))
            .collect()
    }

    /// Overwrites row `row` (for tests that start replicas from distinct models).
    pub fn set_params_host(&mut self, row: usize, values: &[f32]) {
        assert_eq!(
            values.len(),
            self.model.num_params(),
            "one value per parameter"
        );
        self.rows.set(row, values.to_vec());
    }

    /// A requested gradient, read back to the host (evaluating pending requests if needed).
    pub fn gradient_host(&mut self, grad: GradId) -> Vec<f32> {
        self.gradient(grad).as_ref().clone()
    }

    /// The features of the `k`-th pending request's minibatch as the gradient pass will see
    /// them (`batch × dim`, augmented if augmentation is on), and its sample indices; for checks.
    pub fn pending_batch_host(&self, k: usize) -> (Vec<usize>, Vec<f32>) {
        let p = &self.pending[k];
        let features = match &p.features {
            Some(f) => f.clone(),
            None => match &self.train {
                Held::Host(train) => p
                    .batch
                    .iter()
                    .flat_map(|&i| train.sample(i))
                    .copied()
                    .collect(),
                Held::Device(_) => {
                    let (x, _) = self.minibatches(1, &p.batch, None);
                    x.into_data().try_into_vec().expect("f32 features")
                }
            },
        };
        (p.batch.clone(), features)
    }

    /// Gradients and losses of the models `rows` (each `params` long) on the minibatches
    /// `batches` (one per row, equal sizes), computed in one batch and read back to the host.
    /// This is the computation behind every gradient request, exposed for checks.
    pub fn gradients_host(
        &self,
        rows: &[Vec<f32>],
        batches: &[Vec<usize>],
    ) -> (Vec<Vec<f32>>, Vec<f32>) {
        let p = self.model.num_params();
        let scaled: Vec<(&[f32], f64)> = rows.iter().map(|r| (&r[..], 1.0)).collect();
        if let Some(cpu) = &self.cpu {
            let mut grads = Vec::with_capacity(rows.len());
            let mut losses = Vec::with_capacity(rows.len());
            for (row, batch) in rows.iter().zip(batches) {
                let mut g = vec![0.0; p];
                losses.push(self.cpu_gradient(&**cpu, row, 1.0, batch, None, &mut g));
                grads.push(g);
            }
            return (grads, losses);
        }
        let blocks = self.block_tensors(&scaled);
        let (parts, losses) = self.batched_gradient(blocks, &batches.concat(), None);
        let (read, losses) = Self::read_gradients(parts, losses);
        let grads = (0..rows.len())
            .map(|i| {
                let mut g = vec![0.0; p];
                read.copy_into(i, &mut g);
                g
            })
            .collect();
        (grads, losses)
    }

    /// The training objective of the models `rows` on the minibatches `batches` (the quantity
    /// [`BurnStore::gradients_host`] differentiates: training mode, batch statistics), without
    /// autodiff.
    pub fn losses_host(&self, rows: &[Vec<f32>], batches: &[Vec<usize>]) -> Vec<f32> {
        if self.cpu.is_some() {
            return self.gradients_host(rows, batches).1;
        }
        let params = self.host_rows(rows);
        let (x, y) = self.minibatches(rows.len(), &batches.concat(), None);
        self.losses(params, x, y, true)
            .0
            .into_data()
            .try_into_vec()
            .expect("f32 losses")
    }

    pub(super) fn host_rows(&self, rows: &[Vec<f32>]) -> Tensor<2> {
        let p = self.model.num_params();
        Tensor::from_data(
            TensorData::new(rows.concat(), [rows.len(), p]),
            &self.device,
        )
    }

    pub(super) fn mean_of_workers(&mut self) -> Vec<f32> {
        self.rows.mean_of(0..self.workers())
    }

    pub(super) fn slot(&self, slot: Slot) -> &[f32] {
        match slot {
            Slot::Row(r) => self.rows.get(r),
            Slot::Msg(m) => self
                .msgs
                .get(m.0)
                .unwrap_or_else(|| panic!("message buffer {m:?} was released or never made")),
        }
    }

    /// `f` of the values of `terms`' slots with their weights: gathered on the stack for up to
    /// [`STACK_TERMS`] terms (every pairwise average and its reply, many per worker step), in
    /// a vector beyond.
    pub(super) fn with_slots<R>(
        &self,
        terms: &[(Slot, f64)],
        f: impl FnOnce(&[(&[f32], f64)]) -> R,
    ) -> R {
        if terms.len() <= STACK_TERMS {
            let mut gathered: [(&[f32], f64); STACK_TERMS] = [(&[], 0.0); STACK_TERMS];
            for (g, &(s, w)) in gathered.iter_mut().zip(terms) {
                *g = (self.slot(s), w);
            }
            f(&gathered[..terms.len()])
        } else {
            let gathered: Vec<(&[f32], f64)> =
                terms.iter().map(|&(s, w)| (self.slot(s), w)).collect();
            f(&gathered)
        }
    }

    /// Settles the rows among `terms` ([`Rows::settle`]), so that [`BurnStore::slot`] can read
    /// them.
    pub(super) fn settle(&mut self, terms: &[(Slot, f64)]) {
        for &(slot, _) in terms {
            if let Slot::Row(r) = slot {
                self.rows.settle(r);
            }
        }
    }

    /// `Σ weight · slot`, of settled rows.
    pub(super) fn combine(&self, terms: &[(Slot, f64)]) -> Vec<f32> {
        self.with_slots(terms, combine)
    }

    /// `Σ weight · slot` in a spare buffer of the rows (the hot path: no allocation).
    pub(super) fn combine_spare(&mut self, terms: &[(Slot, f64)]) -> Vec<f32> {
        self.settle(terms);
        let mut out = self.rows.buffer();
        self.with_slots(terms, |terms| {
            combine_into_split(&mut out, terms, self.threads)
        });
        out
    }
}
