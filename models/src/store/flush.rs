//! The request queue and its flush: pending gradient requests evaluated together when a
//! result is first needed, fused means, and the read-back into host buffers.

use super::*;

impl BurnStore {
    /// Gradient `id` as a step applies it: clipped by `clip_norm` over its trainable part
    /// `..split` (the state delta after it is not a gradient, and is kept as it is). The
    /// clipped copy is made once per gradient and kept until the gradient is released, so the
    /// rows a mean is applied to share it.
    pub(super) fn clipped(&mut self, id: GradId, split: usize) -> Arc<Vec<f32>> {
        let g = self.gradient(id);
        if self.optimizer.clip_norm.is_none() {
            return g;
        }
        if let Some(c) = self.clipped.get(&id) {
            return Arc::clone(c);
        }
        let norm = g[..split]
            .iter()
            .map(|v| f64::from(*v) * f64::from(*v))
            .sum::<f64>()
            .sqrt();
        let c = self.optimizer.clip_factor(norm);
        if c >= 1.0 {
            return g;
        }
        let mut scaled = self.rows.buffer();
        for (s, v) in scaled[..split].iter_mut().zip(&g[..split]) {
            *s = (f64::from(*v) * c) as f32;
        }
        scaled[split..].copy_from_slice(&g[split..]);
        let scaled = Arc::new(scaled);
        self.clipped.insert(id, Arc::clone(&scaled));
        scaled
    }

    pub(super) fn gradient(&mut self, id: GradId) -> Arc<Vec<f32>> {
        // One lookup when it is in its buffer (nearly always: DASGD applies each gradient `n`
        // times).
        if let Some(Ready::Host(g)) = self.ready.get(&id) {
            return Arc::clone(g);
        }
        if !self.ready.contains_key(&id) {
            self.flush();
        }
        self.copy_out();
        match self.ready.get(&id) {
            Some(Ready::Host(g)) => Arc::clone(g),
            _ => panic!("gradient {id:?} was released or never requested"),
        }
    }

    /// Copies every gradient still in its flush's read-back blocks into a buffer of its own
    /// (spread over the threads when long), for a use other than a mean: the copy a flush would
    /// otherwise make of each, made at the first such use instead.
    pub(super) fn copy_out(&mut self) {
        if self.unread.is_empty() {
            return;
        }
        let started = Instant::now();
        let mut work: Vec<(GradId, Arc<ReadBack>, usize, Vec<f32>)> = Vec::new();
        for id in std::mem::take(&mut self.unread) {
            if matches!(self.ready.get(&id), Some(Ready::Read(..)))
                && let Some(Ready::Read(read, i)) = self.ready.remove(&id)
            {
                work.push((id, read, i, self.rows.buffer()));
            }
        }
        let floats = work.len() * self.rows.width();
        if self.threads > 1 && work.len() > 1 && floats >= crate::rows::PARALLEL_FLOATS {
            let per_thread = work.len().div_ceil(self.threads);
            work.par_iter_mut()
                .with_min_len(per_thread)
                .for_each(|(_, read, i, out)| read.copy_into(*i, out));
        } else {
            for (_, read, i, out) in &mut work {
                read.copy_into(*i, out);
            }
        }
        for (id, _, _, out) in work {
            self.ready.insert(id, Ready::Host(Arc::new(out)));
        }
        self.stats.gradient_wall += started.elapsed();
    }

    /// Evaluates every pending request: in one batched forward/backward pass, or in groups of
    /// at most `max_batch`, cut further so that each of `threads` threads has one.
    pub(super) fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // A past flush's gradient still in its blocks (one no mean has used, as a crashed
        // worker's) gets its own buffer now, so that it keeps no more than that alive.
        self.copy_out();
        let started = Instant::now();
        let pending = std::mem::take(&mut self.pending);
        let r = pending.len();
        // A flush too small to gain from a second thread stays on this one: waking a sleeping
        // thread costs tens of microseconds here, more than a small model's whole flush. On a
        // GPU a flush is one pass whatever the threads: the device runs the replicas in
        // parallel already, and each more pass pays the launches and the read-back again.
        let flops = r as f64 * self.batch as f64 * self.model.train_flops_per_sample();
        let threads = if flops < self.parallel_flops || !self.on_cpu {
            1
        } else {
            self.threads
        };
        if let Some(cpu) = self.cpu.clone() {
            self.cpu_flush(&*cpu, pending, threads);
            self.stats.gradient_wall += started.elapsed();
            return;
        }
        let groups = r.div_ceil(self.max_batch.unwrap_or(r)).max(threads.min(r));
        let bounds = dasim_sim::store::blocks(r, groups);
        let results: Vec<(ReadBack, Vec<f32>)> = if groups > 1 && threads > 1 {
            bounds
                .par_iter()
                .map(|b| self.group_gradients(&pending[b.clone()]))
                .collect()
        } else {
            bounds
                .iter()
                .map(|b| self.group_gradients(&pending[b.clone()]))
                .collect()
        };
        let mut pending = pending.into_iter();
        let state = self.model.trainable().end..self.model.num_params();
        for (mut read, losses) in results {
            let group: Vec<Pending> = pending.by_ref().take(losses.len()).collect();
            for (i, q) in group.iter().enumerate() {
                if q.scale != 1.0 {
                    // The state delta in the row's units: a row read at `scale` holds the
                    // statistics times `1/scale` (push-sum's numerator `w·z`).
                    read.unscale(i, &state, q.scale);
                }
            }
            // The gradients stay in the read-back blocks until a use other than a mean
            // ([`BurnStore::copy_out`]).
            let read = Arc::new(read);
            for (i, (q, loss)) in group.into_iter().zip(losses).enumerate() {
                self.ready.insert(q.id, Ready::Read(Arc::clone(&read), i));
                self.unread.push(q.id);
                self.rows.recycle(q.snapshot);
                self.train_loss += f64::from(loss);
            }
            self.stats.passes += 1;
        }
        self.stats.flushes += 1;
        self.train_loss_count += r;
        self.stats.gradient_wall += started.elapsed();
    }

    /// The mean of `grads` as one model's gradient on the union of their minibatches, where
    /// that is what it is: every input still pending, all read at the same scale from rows of
    /// the same bits, on a model whose mean is so taken ([`Model::fuses_means`]).
    /// All-reduce's mean is such a mean at every step (its replicas hold the same bits from
    /// the first step to the last). Then `Σ_r ∇ℓ_r(θ) / R = ∇(Σ_r ℓ_r / R)(θ)`: one pass of
    /// `R · batch` samples through one copy of the parameters instead of `R` replicas' passes
    /// and a mean over `R` gradients, with matrix products `R` times taller, one row uploaded
    /// and one gradient read back. On the CPU the requests go in passes of [`fused_chunk`] (in
    /// the order of `grads`), whose gradients are summed in that order: the same bits for any
    /// threads and `max_batch`. On a GPU they go in one pass, or passes of `max_batch`, as a
    /// flush does. The per-request losses are each request's own, as in a flush. `None`
    /// (nothing done) where the mean is not such a mean.
    pub(super) fn fused_mean(&mut self, grads: &[GradId]) -> Option<GradId> {
        if grads.len() < 2 || !self.model.fuses_means() {
            return None;
        }
        // Pending requests are in request order, so by handle.
        let at: Vec<usize> = grads
            .iter()
            .map(|g| self.pending.binary_search_by_key(g, |p| p.id).ok())
            .collect::<Option<_>>()?;
        let first = &self.pending[at[0]];
        let same = at[1..].iter().all(|&i| {
            let q = &self.pending[i];
            q.scale == first.scale && same_row(&q.snapshot, &first.snapshot)
        });
        if !same {
            return None;
        }
        let started = Instant::now();
        let mut slots: Vec<Option<Pending>> = std::mem::take(&mut self.pending)
            .into_iter()
            .map(Some)
            .collect();
        let taken: Vec<Pending> = at
            .iter()
            .map(|&i| slots[i].take().expect("a gradient listed twice in a mean"))
            .collect();
        self.pending = slots.into_iter().flatten().collect();
        let r = taken.len();
        // On the CPU the passes are fixed by the model and the minibatch, so the bits are the
        // same for any threads and batch limit. On a GPU (whose sums are not bit-reproducible
        // anyway) a pass is bound by launches and the read-back, not by arithmetic: the mean is
        // one pass, or passes of `max_batch` requests, as a flush is.
        let chunk = if self.on_cpu {
            fused_chunk(&self.model, self.batch)
        } else {
            self.max_batch.unwrap_or(r)
        };
        let chunks: Vec<&[Pending]> = taken.chunks(chunk).collect();
        let flops = r as f64 * self.batch as f64 * self.model.train_flops_per_sample();
        let parallel =
            chunks.len() > 1 && self.threads > 1 && self.on_cpu && flops >= self.parallel_flops;
        let weight = 1.0 / r as f64;
        let results: Vec<(ReadBack, Vec<f32>)> = if parallel {
            chunks
                .par_iter()
                .map(|c| self.fused_gradient(c, weight))
                .collect()
        } else {
            chunks
                .iter()
                .map(|c| self.fused_gradient(c, weight))
                .collect()
        };
        let passes = chunks.len() as u64;
        let mut mean = self.rows.buffer();
        let mut results = results.into_iter();
        let (read, losses) = results.next().expect("at least one chunk");
        read.copy_into(0, &mut mean);
        let mut all_losses = losses;
        for (read, losses) in results {
            for (k, (range, _)) in read.parts.iter().enumerate() {
                for (m, g) in mean[range.clone()].iter_mut().zip(read.part(k, 0)) {
                    *m += g;
                }
            }
            all_losses.extend(losses);
        }
        for (q, loss) in taken.into_iter().zip(all_losses) {
            self.rows.recycle(q.snapshot);
            self.train_loss += f64::from(loss);
        }
        self.train_loss_count += r;
        self.stats.passes += passes;
        self.stats.flushes += 1;
        self.stats.fused_means += 1;
        self.stats.gradient_wall += started.elapsed();
        Some(self.insert_mean(grads, mean))
    }

    /// A new gradient holding `mean`, the mean of `grads`, owned by their owners.
    pub(super) fn insert_mean(&mut self, grads: &[GradId], mean: Vec<f32>) -> GradId {
        let mut owners = Vec::new();
        for g in grads {
            owners.extend(self.owners.remove(g).unwrap_or_default());
        }
        owners.sort_unstable();
        owners.dedup();
        let id = GradId(self.next_id);
        self.next_id += 1;
        self.ready.insert(id, Ready::Host(Arc::new(mean)));
        self.owners.insert(id, owners);
        id
    }

    /// The training indices of `requests`' minibatches, one after the other, and their
    /// augmented features when they have them.
    pub(super) fn requests_batches(&self, requests: &[Pending]) -> (Vec<usize>, Option<Vec<f32>>) {
        let r = requests.len();
        let mut indices = Vec::with_capacity(r * self.batch);
        let mut features = requests[0]
            .features
            .is_some()
            .then(|| Vec::with_capacity(r * self.batch * self.dim));
        for q in requests {
            indices.extend_from_slice(&q.batch);
            if let (Some(all), Some(f)) = (features.as_mut(), q.features.as_ref()) {
                all.extend_from_slice(f);
            }
        }
        (indices, features)
    }

    /// A flush on the CPU path: each request's gradient through the model's CPU program,
    /// into a spare buffer of the rows, the requests spread over `threads` threads one by one
    /// (a replica's pass is single-threaded and the same whichever thread runs it).
    pub(super) fn cpu_flush(&mut self, cpu: &dyn CpuNet, pending: Vec<Pending>, threads: usize) {
        let r = pending.len();
        let mut grads: Vec<Vec<f32>> = (0..r).map(|_| self.rows.buffer()).collect();
        // A replica per thread where the requests fill the threads evenly enough; otherwise
        // one request after another, each spreading its layers over the threads.
        let by_request = threads > 1 && (r == threads || r >= 2 * threads);
        let run = |(q, g): (&Pending, &mut Vec<f32>)| {
            let (batch, features) = (&q.batch, q.features.as_deref());
            with_inner_parallelism(!by_request, || {
                self.cpu_gradient(cpu, &q.snapshot, q.scale, batch, features, g)
            })
        };
        let losses: Vec<f32> = if by_request {
            pending
                .par_iter()
                .zip(grads.par_iter_mut())
                .map(run)
                .collect()
        } else {
            pending.iter().zip(grads.iter_mut()).map(run).collect()
        };
        let state = self.model.trainable().end..self.model.num_params();
        for ((q, mut g), loss) in pending.into_iter().zip(grads).zip(losses) {
            if q.scale != 1.0 {
                // The state delta in the row's units (see `flush`).
                for v in &mut g[state.clone()] {
                    *v = (f64::from(*v) / q.scale) as f32;
                }
            }
            self.ready.insert(q.id, Ready::Host(Arc::new(g)));
            self.rows.recycle(q.snapshot);
            self.train_loss += f64::from(loss);
        }
        self.stats.passes += r as u64;
        self.stats.flushes += 1;
        self.train_loss_count += r;
    }

    /// Gradients and losses `[R]` of a group of requests, read back in one transfer.
    pub(super) fn group_gradients(&self, group: &[Pending]) -> (ReadBack, Vec<f32>) {
        let (indices, features) = self.requests_batches(group);
        let rows: Vec<(&[f32], f64)> = group.iter().map(|q| (&q.snapshot[..], q.scale)).collect();
        let blocks = self.block_tensors(&rows);
        let (parts, losses) = self.batched_gradient(blocks, &indices, features);
        Self::read_gradients(parts, losses)
    }

    /// Reads a batch's gradient blocks and losses back in one transfer, with no concatenation
    /// on the device.
    pub(super) fn read_gradients(
        parts: Vec<(Range<usize>, Tensor<2>)>,
        losses: Tensor<1>,
    ) -> (ReadBack, Vec<f32>) {
        let mut read = Transaction::default();
        let mut ranges = Vec::with_capacity(parts.len());
        for (range, t) in parts {
            ranges.push(range);
            read = read.register(t);
        }
        let mut data = read.register(losses).execute().into_iter();
        let parts = ranges
            .into_iter()
            .map(|range| (range, data.next().expect("one result per block")))
            .collect();
        let losses: Vec<f32> = data
            .next()
            .expect("losses")
            .try_into_vec()
            .expect("f32 losses");
        (ReadBack { parts }, losses)
    }
}
