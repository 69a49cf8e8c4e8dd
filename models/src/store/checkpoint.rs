//! The store's part of a run checkpoint: rows, samplers, pending requests, gradients and
//! messages, written with postcard and read back exactly.

use super::*;

/// What a checkpoint keeps of a [`BurnStore`], borrowed for writing ([`BurnState`] reads it
/// back): everything that changes while a run goes on. The model, the data on the device and
/// the configuration are rebuilt with the store.
#[derive(Serialize)]
struct BurnStateRef<'a> {
    rows: &'a Rows,
    samplers: &'a [Sampler],
    pending: &'a [Pending],
    ready: &'a BTreeMap<GradId, Arc<Vec<f32>>>,
    owners: &'a BTreeMap<GradId, Vec<usize>>,
    msgs: BTreeMap<MsgId, Row>,
    next_id: u64,
    train_loss: (f64, usize),
    stats: StoreStats,
}

/// [`BurnStateRef`], owned.
#[derive(Deserialize)]
struct BurnState {
    rows: Rows,
    samplers: Vec<Sampler>,
    pending: Vec<Pending>,
    ready: BTreeMap<GradId, Arc<Vec<f32>>>,
    owners: BTreeMap<GradId, Vec<usize>>,
    msgs: BTreeMap<MsgId, Row>,
    next_id: u64,
    train_loss: (f64, usize),
    stats: StoreStats,
}

impl BurnStore {
    pub(super) fn save(&mut self) -> Result<Vec<u8>, String> {
        // Queued steps are not part of a checkpoint: apply them first. Gradients are written
        // each in its own buffer.
        self.rows.settle_all();
        self.copy_out();
        let ready: BTreeMap<GradId, Arc<Vec<f32>>> = self
            .ready
            .iter()
            .map(|(&id, g)| match g {
                Ready::Host(g) => (id, Arc::clone(g)),
                Ready::Read(..) => unreachable!("copied out above"),
            })
            .collect();
        let state = BurnStateRef {
            rows: &self.rows,
            samplers: &self.samplers,
            pending: &self.pending,
            ready: &ready,
            owners: &self.owners,
            msgs: self
                .msgs
                .sorted()
                .into_iter()
                .map(|(id, m)| (MsgId(id), Arc::clone(m)))
                .collect(),
            next_id: self.next_id,
            train_loss: (self.train_loss, self.train_loss_count),
            stats: self.stats,
        };
        postcard::to_stdvec(&state).map_err(|e| e.to_string())
    }

    pub(super) fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let state: BurnState = postcard::from_bytes(state).map_err(|e| e.to_string())?;
        if state.rows.width() != self.rows.width() || state.samplers.len() != self.samplers.len() {
            return Err(format!(
                "the checkpoint holds {} replicas of {} parameters, this run {} of {}",
                state.samplers.len(),
                state.rows.width(),
                self.samplers.len(),
                self.rows.width()
            ));
        }
        self.rows = state.rows;
        self.rows.set_threads(self.threads);
        self.samplers = state.samplers;
        self.pending = state.pending;
        self.ready = state
            .ready
            .into_iter()
            .map(|(id, g)| (id, Ready::Host(g)))
            .collect();
        self.unread.clear();
        self.owners = state.owners;
        self.msgs = state.msgs.into_iter().map(|(id, m)| (id.0, m)).collect();
        self.next_id = state.next_id;
        (self.train_loss, self.train_loss_count) = state.train_loss;
        self.stats = state.stats;
        Ok(())
    }
}
