//! Checkpoints: the whole state of a run in progress, as bytes, and what a run needs to take
//! them and to continue from one.
//!
//! A checkpoint of an algorithm's run ([`crate::algorithms::run_algorithm_checkpointed`]) holds
//! everything that decides what happens next: the driver's position (clock, events handled, the
//! next evaluation point, the divergence guard), the event queue, the algorithm's state (every
//! worker's phase, its random streams, the messages it tracks), the world (every worker's
//! compute model and random streams, the network's links, queues and congestion processes, the
//! faults, the recorder's intervals and histograms, the step counters) and the store's state
//! through [`ReplicaStore::save_state`] (replicas, optimizer state, data streams, pending
//! gradient requests, message buffers). The graph is not in it: it is a function of the
//! scenario, rebuilt on resume. Restoring a checkpoint into a world built from the same scenario
//! and running on gives the same events, in the same order, with the same numbers, as the run
//! that was never interrupted (`tests/integration/resume.rs`).
//!
//! Checkpoints are taken between events: at the first gap in the event sequence at or after each
//! multiple of [`Checkpointing::every`] (all events up to that time handled, and the evaluation
//! points before it written), and when [`Checkpointing::interrupt`] is raised, after the event
//! being handled. The bytes go to [`crate::engine::Observer::on_checkpoint`]; where they are
//! kept is the caller's business. The encoding is [postcard](https://docs.rs/postcard) behind a
//! magic number and a format version: a checkpoint of another format version is refused, not
//! misread.
//!
//! [`ReplicaStore::save_state`]: crate::store::ReplicaStore::save_state

use std::sync::atomic::AtomicBool;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::clock::time::SimTime;
use crate::engine::error::{Error, Result};

/// The first bytes of every checkpoint of the engine.
pub const MAGIC: &[u8; 8] = b"DASIMCKP";

/// The format version; bumped whenever the encoded state changes shape (15: the
/// neighbour-synchronous methods share one event type, `neighbours::Event`; asynchronous
/// Local-SGD holds its server's rule, FedBuff's buffer count and the clients' draws; 14: the
/// neighbour exchange of D-PSGD and CHOCO-SGD holds its peers as a static graph or a peer
/// schedule, for Push-DIGing; 13: the cluster keeps
/// every node's host work, `[cluster] host_gbps` and `host_tflops`; 12: CHOCO-SGD keeps the
/// tensors it compresses one by one and its schedule; PowerSGD gains `variant`, `start_after`
/// and `min_compression_rate`, in all-reduce SGD's state and in the compressor's stored form, and
/// the library variant's third ring and event; 11: asynchronous Local-SGD's options gain
/// `momentum_activation`, and `momentum_every` may be the number of workers).
pub const VERSION: u32 = 15;

/// When to take checkpoints, and what to continue from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Checkpointing<'a> {
    /// Take a checkpoint every this much simulated time (`None`: only on interrupt).
    pub every: Option<SimTime>,
    /// Raised from outside (a Ctrl-C handler): the run stops after the event being handled,
    /// takes a checkpoint and ends with [`Error::Interrupted`].
    pub interrupt: Option<&'a AtomicBool>,
    /// A checkpoint to continue from, as the observer received it.
    pub resume: Option<&'a [u8]>,
}

/// Encodes `value` behind the magic number and the format version.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    postcard::to_io(value, &mut out)
        .map_err(|e| checkpoint_error(format!("cannot encode: {e}")))?;
    Ok(out)
}

/// Decodes what [`encode`] wrote; refuses other data and other format versions.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err(checkpoint_error(
            "not a dasim checkpoint (bad magic number)",
        ));
    };
    if rest.len() < 4 {
        return Err(checkpoint_error("truncated"));
    }
    let (version, body) = rest.split_at(4);
    let version = u32::from_le_bytes(version.try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(checkpoint_error(format!(
            "format version {version}, this dasim reads version {VERSION}: resume it with the \
             dasim that wrote it"
        )));
    }
    postcard::from_bytes(body).map_err(|e| checkpoint_error(format!("cannot decode: {e}")))
}

/// The error of a checkpoint that cannot be written or read.
pub fn checkpoint_error(message: impl Into<String>) -> Error {
    Error::Checkpoint(message.into())
}
