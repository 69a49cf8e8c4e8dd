//! The memory a run needs, estimated before it starts.
//!
//! A run that would not fit should say so before it has spent an hour, not fail mid-way. The
//! store's memory is linear in what it holds ([`crate::rows`]): the rows, their optimizer state,
//! and whatever is in flight — the snapshot of each pending gradient request, messages and
//! computed gradients, each at most `P` numbers. The estimate counts, for `n` workers and `P`
//! parameters (4 bytes each, 8 for the exact `f64` quadratic):
//!
//! | part | bytes |
//! |---|---|
//! | parameters | `rows · P · 4` (the workers' replicas and an algorithm's extra rows) |
//! | optimizer state | `rows · P · 4 · s`: `s` = 1 with momentum (SGD, LARS), 3 for Adam (two moments and a step count), else 0 |
//! | in flight | `3 · n · P · 4`: a snapshot, a message and a gradient per worker |
//! | data | the training and test features, twice (host copy and device copy) |
//! | flush | `R · batch · a · 4 · 3` for a flush of `R` requests, `a` floats per sample ([`Model::activations_per_sample`]): values, saved inputs and their gradients; and `2 · R · P · 4` for the stacked parameters and their gradients; on a GPU, from [`crate::lenet::IM2COL_MIN_REPLICAS`] requests, `R · batch · c · 4 · 2` for the convolutions' im2col columns and their gradients, `c` floats per sample ([`Model::im2col_floats_per_sample`]); `R` is every worker, or the batch limit, but on the CPU at least [`crate::store::fused_chunk`] (or `n`) where the model fuses means ([`Model::fuses_means`]); a model with a CPU program on the CPU (the convolutional models and the transformer, [`Model::cpu_program`]) runs it instead: `t · (w + batch · d) · 4` for `t` threads, each keeping the buffers of one training pass (`w` floats, [`crate::layers::CpuNet::train_floats`], reused from pass to pass and by the evaluation, which goes in chunks of a minibatch) and a minibatch's inputs (`d` floats per sample) |
//! | queued | `m · 72 + g · P · 4`: `m` messages still waiting behind their sender's uplink at the end of the run, [`QUEUED_MESSAGE_BYTES`] each, holding `g` model-sized buffers |
//!
//! The queued messages are those of an algorithm that posts without waiting for anything
//! (DASGD: every gradient to every other worker, or to its neighbours) faster than the uplink
//! carries them: they pile up for the whole run, `(k/t − B/S) · T` of them per worker for `k`
//! messages of `S` bytes per step of `t` seconds on an uplink of `B` bytes/s over a run of `T`
//! seconds, besides the `k` of the step being sent, which are in flight even when the uplink
//! keeps up. The plan computes `m` and `g` (`dasim::plan::Plan::memory_estimate`); every other
//! algorithm waits before it posts again, so what it has queued is bounded by the workers.
//!
//! It is an estimate: the simulator's own bookkeeping (the staleness recorder, the metrics'
//! tables) is left out, and the allocator adds its own overhead.

use std::fmt;

use crate::model::Model;

/// The estimated memory of one run, by part, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEstimate {
    /// Every row's parameters.
    pub parameters: u64,
    /// Momentum buffers.
    pub optimizer: u64,
    /// Snapshots of pending gradient requests, messages and computed gradients.
    pub in_flight: u64,
    /// The data set, on the host and on the device.
    pub data: u64,
    /// The activations, stacked parameters and gradients of the largest flush.
    pub activations: u64,
    /// Messages waiting behind their sender's uplink at the end of the run, and the buffers
    /// they hold.
    pub queued: u64,
}

/// Memory of one message waiting in the network (its key in the event queue and its event,
/// 48 bytes, with the growth of their arrays), bytes. Measured: DASGD broadcasting
/// ResNet-50-sized gradients on 10 GbE at 1,024 workers, whose messages nearly all queue,
/// peaked at 0.86 GB with 9.4 million messages posted and 3.03 GB with 40.9 million, 69 bytes
/// per message.
pub const QUEUED_MESSAGE_BYTES: u64 = 72;

/// What a run is made of, for [`MemoryEstimate::new`].
#[derive(Clone, Copy, Debug)]
pub struct RunShape<'a> {
    /// The model.
    pub model: &'a Model,
    /// Worker replicas.
    pub workers: usize,
    /// Rows in all: the workers' and an algorithm's extra rows.
    pub rows: usize,
    /// Samples per minibatch.
    pub batch: usize,
    /// Numbers of optimizer state per parameter and row
    /// ([`dasim_sim::store::OptimizerConfig::state_per_param`]; the most of any algorithm's).
    pub optimizer_state: u64,
    /// Features of the training and test splits together (numbers).
    pub data_floats: usize,
    /// Requests evaluated in one forward/backward pass at most (`None`: every worker's).
    pub max_batch: Option<usize>,
    /// Messages waiting behind their sender's uplink at the end of the run (see the module's
    /// documentation).
    pub queued_messages: u64,
    /// Model-sized buffers those messages hold (one per gradient however many messages carry
    /// it).
    pub queued_models: u64,
    /// Whether the gradients run on a GPU, where the convolutions of a large enough pass keep
    /// im2col's column matrices for the backward pass.
    pub gpu: bool,
    /// Threads the CPU passes run on (`--threads`): each keeps its own buffers for a
    /// convolutional model's CPU program.
    pub threads: usize,
}

impl MemoryEstimate {
    /// The estimate for a run of `shape`.
    pub fn new(shape: RunShape<'_>) -> Self {
        let p = shape.model.num_params() as u64;
        // A timing model holds no parameter: its rows have a size but no memory.
        let width = match shape.model {
            Model::Quadratic(_) => 8,
            Model::Timing(_) => 0,
            _ => 4,
        };
        let row = p * width;
        let parameters = shape.rows as u64 * row;
        // On the CPU a fused mean's passes hold `fused_chunk` requests whatever the batch limit
        // says (so that its sums are the same bits for every limit); on a GPU they follow it.
        let fused = if shape.model.fuses_means() && !shape.gpu {
            crate::store::fused_chunk(shape.model, shape.batch).min(shape.workers)
        } else {
            0
        };
        let flush = shape
            .max_batch
            .map_or(shape.workers, |m| m.min(shape.workers).max(fused)) as u64;
        // im2col's columns and, during the backward pass, their gradient.
        let columns = if shape.gpu && flush >= crate::lenet::IM2COL_MIN_REPLICAS as u64 {
            flush * shape.batch as u64 * shape.model.im2col_floats_per_sample() * 4 * 2
        } else {
            0
        };
        let activations = match shape.model.cpu_program().filter(|_| !shape.gpu) {
            // The CPU program: every thread keeps the maps of one training pass (reused from
            // pass to pass, and by the evaluation's chunks of a minibatch's size) and a
            // minibatch's inputs; a flush's gradients are among the buffers in flight.
            Some(program) => {
                let per_thread =
                    program.train_floats(shape.batch) + shape.batch * program.input_len();
                shape.threads.max(1) as u64 * per_thread as u64 * 4
            }
            None => {
                flush * shape.batch as u64 * shape.model.activations_per_sample() * 4 * 3
                    + 2 * flush * row
                    + columns
            }
        };
        MemoryEstimate {
            parameters,
            optimizer: shape.optimizer_state * parameters,
            in_flight: 3 * shape.workers as u64 * row,
            data: 2 * 4 * shape.data_floats as u64,
            activations,
            queued: shape
                .queued_messages
                .saturating_mul(QUEUED_MESSAGE_BYTES)
                .saturating_add(shape.queued_models.saturating_mul(row)),
        }
    }

    /// All parts together.
    pub fn total(&self) -> u64 {
        self.parameters
            + self.optimizer
            + self.in_flight
            + self.data
            + self.activations
            + self.queued
    }
}

impl fmt::Display for MemoryEstimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (parameters {}, optimizer state {}, in flight {}, data {}, activations {}",
            Bytes(self.total()),
            Bytes(self.parameters),
            Bytes(self.optimizer),
            Bytes(self.in_flight),
            Bytes(self.data),
            Bytes(self.activations)
        )?;
        if self.queued > 0 {
            // Only where an algorithm can pile messages up: the usual line stays short.
            write!(f, ", queued in the network {}", Bytes(self.queued))?;
        }
        write!(f, ")")
    }
}

/// A byte count in binary units (`1.5 GiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{v:.1} {}", UNITS[unit])
        }
    }
}

impl std::str::FromStr for Bytes {
    type Err = String;

    /// `512MiB`, `2 GiB`, `1.5GB`, `100000` (bytes): binary units with `i`, decimal without.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let num: f64 = num
            .parse()
            .map_err(|_| format!("`{s}` is not a size: write e.g. 512MiB or 2GiB"))?;
        let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" => 1e3,
            "m" | "mb" => 1e6,
            "g" | "gb" => 1e9,
            "t" | "tb" => 1e12,
            "ki" | "kib" => 1024.0,
            "mi" | "mib" => 1024.0 * 1024.0,
            "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "ti" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            other => {
                return Err(format!(
                    "unknown unit `{other}` in `{s}`: use B, KiB, MiB, GiB, TiB (or kB, MB, GB, TB)"
                ));
            }
        };
        Ok(Bytes((num * scale) as u64))
    }
}

/// The memory this machine can still give a process (`MemAvailable` of `/proc/meminfo`), where
/// the system says.
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::ImageShape;
    use crate::mlp::{Activation, Mlp};

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!("512MiB".parse::<Bytes>().unwrap(), Bytes(512 << 20));
        assert_eq!("2 GiB".parse::<Bytes>().unwrap(), Bytes(2 << 30));
        assert_eq!("1.5GB".parse::<Bytes>().unwrap(), Bytes(1_500_000_000));
        assert_eq!("100".parse::<Bytes>().unwrap(), Bytes(100));
        assert!("12 parsecs".parse::<Bytes>().is_err());
        assert_eq!(Bytes(1536 << 20).to_string(), "1.5 GiB");
        assert_eq!(Bytes(10).to_string(), "10 B");
    }

    /// The estimate for `workers` workers training `model` with momentum, batch 32, no data and
    /// nothing queued.
    fn estimate(model: &Model, workers: usize, gpu: bool) -> MemoryEstimate {
        MemoryEstimate::new(RunShape {
            model,
            workers,
            rows: workers,
            batch: 32,
            optimizer_state: 1,
            data_floats: 0,
            max_batch: None,
            queued_messages: 0,
            queued_models: 0,
            gpu,
            threads: 2,
        })
    }

    #[test]
    fn the_estimate_is_linear_in_the_workers() {
        let model = Model::net(Mlp::new(&[64, 32, 10], Activation::Relu));
        let at = |workers| estimate(&model, workers, false).total();
        assert_eq!(at(1024), 64 * at(16));
        // The 1,024-worker quickstart: 2,410 parameters, so rows, momentum and in-flight buffers
        // are 5 · 1024 · 2410 · 4 bytes ≈ 47 MiB; a flush of every worker holds 1024 · 32
        // samples · 148 floats · 3 ≈ 56 MiB of activations and 2 · 1024 · 2410 · 4 ≈ 19 MiB of
        // stacked parameters and gradients.
        let total = at(1024);
        assert!((120 << 20..125 << 20).contains(&total), "{}", Bytes(total));
    }

    /// On a GPU a convolutional model's pass of 8 or more requests keeps im2col's columns (and
    /// their gradients) besides the activations; an MLP's does not, and neither does a smaller
    /// pass.
    #[test]
    fn a_gpu_pass_counts_the_convolutions_columns() {
        let shape = ImageShape {
            channels: 1,
            height: 28,
            width: 28,
        };
        let lenet = Model::net(crate::LeNet::new(shape, 10));
        let mlp = Model::net(Mlp::new(&[784, 128, 10], Activation::Relu));
        let activations = |model: &Model, workers, gpu| estimate(model, workers, gpu).activations;
        // LeNet's second convolution (the first has one input channel): 6 channels · 5 · 5 taps
        // · 10 · 10 outputs per sample (28×28 images, padded by 2 on the first convolution).
        assert_eq!(lenet.im2col_floats_per_sample(), 6 * 25 * 100);
        let columns = 16 * 32 * 15_000 * 4 * 2;
        let stacked = |workers: u64| {
            workers * 32 * lenet.activations_per_sample() * 4 * 3
                + 2 * workers * lenet.num_params() as u64 * 4
        };
        assert_eq!(activations(&lenet, 16, true), stacked(16) + columns);
        assert_eq!(activations(&lenet, 4, true), stacked(4));
        assert_eq!(activations(&mlp, 16, true), activations(&mlp, 16, false));
    }

    /// On the CPU a convolutional model runs its CPU program: every thread keeps one pass's
    /// buffers, whatever the workers.
    #[test]
    fn a_cpu_program_keeps_one_pass_per_thread() {
        let shape = ImageShape {
            channels: 3,
            height: 32,
            width: 32,
        };
        let resnet = Model::net(crate::ResNet::new(shape, 10, 20, 16));
        let at = |workers| estimate(&resnet, workers, false).activations;
        assert_eq!(at(16), at(1024));
        let program = resnet.cpu_program().unwrap();
        let per_thread = program.train_floats(32) + 32 * 3072;
        assert_eq!(at(16), 2 * per_thread as u64 * 4);
        // One pass of ResNet-20 at batch 32 keeps about 115 MB of maps and gradients.
        let mib = (program.train_floats(32) * 4) >> 20;
        assert!((90..140).contains(&mib), "{mib} MiB");
    }

    /// A batch limit bounds a pass, except that on the CPU all-reduce's fused mean keeps its
    /// passes of `fused_chunk` requests (so that its bits do not depend on the limit); on a GPU
    /// the fused mean follows the limit as a flush does.
    #[test]
    fn a_batch_limit_bounds_a_pass_but_a_cpu_fused_mean() {
        let mlp = Model::net(Mlp::new(&[64, 32, 10], Activation::Relu));
        let flush = |max_batch, gpu| {
            let one = |requests| {
                MemoryEstimate::new(RunShape {
                    model: &mlp,
                    workers: 64,
                    rows: 64,
                    batch: 32,
                    optimizer_state: 1,
                    data_floats: 0,
                    max_batch: Some(requests),
                    queued_messages: 0,
                    queued_models: 0,
                    gpu,
                    threads: 2,
                })
            };
            // Linear in the pass's requests, with nothing else in it.
            let per_request = one(33).activations - one(32).activations;
            one(max_batch).activations / per_request
        };
        let chunk = crate::store::fused_chunk(&mlp, 32) as u64;
        assert_eq!(chunk, 16);
        assert_eq!(flush(4, false), chunk, "the CPU's fused passes");
        assert_eq!(flush(32, false), 32);
        assert_eq!(flush(4, true), 4, "a GPU follows the limit");
    }
}
