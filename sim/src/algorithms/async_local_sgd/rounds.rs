//! FedAvg's rounds on the asynchronous protocol ([`super::ServerRule::FedAvg`]; the options in
//! [`crate::algorithms::fed::FedAvgConfig`]).
//!
//! ```text
//! round t (the server's model x, version t):
//!     the server draws M clients among the idle ones and sends them x       (all, by default)
//!     each trains E local steps from x and pushes x_i
//!     the server keeps the first K pushes of round t: Δ̄ ← Δ̄ + (x − x_i)     (K = M by default)
//!     the round closes at the K-th push, or at the deadline with what came:
//!         x ← x − η_g·Δ̄/k  (k pushes kept; none: x unchanged);   t ← t + 1;   next round
//!     a push of an earlier round is late: discarded, its client idle again
//! ```
//!
//! McMahan et al.'s FedAvg with over-selection (keep the first `K` of `M`) and a deadline, as
//! FedScale's over-commitment and APPFL's `sync_count`/`sync_window` close a round.

use super::{AsyncLocalSgd, Event};
use crate::algorithm::Ctx;
use crate::algorithms::fed::FedAvgConfig;
use crate::cluster::HostWork;
use crate::engine::SimTime;
use crate::record::Activity;
use crate::store::{MsgId, ReplicaStore, Slot};
use rand::Rng;

impl AsyncLocalSgd {
    /// A push of FedAvg's: kept for the open round, or late and discarded; either way its
    /// client is idle until it is drawn again.
    pub(super) fn round_push(
        &mut self,
        w: usize,
        [start, model]: [MsgId; 2],
        base: u64,
        steps: u32,
        cfg: &FedAvgConfig,
        cx: &mut Ctx<'_, '_, Event>,
    ) {
        let kept = base == self.updates;
        self.last = Some(w);
        if kept {
            self.stats.record(0);
            let d = self.buffer_row();
            cx.world.store.mix(
                d,
                &[
                    (Slot::Row(d), 1.0),
                    (Slot::Msg(start), 1.0),
                    (Slot::Msg(model), -1.0),
                ],
            );
            self.buffered += 1;
            let params = cx.world.store.num_params() as u64;
            cx.host_work(self.node, HostWork::touch(4 * params));
        } else {
            self.late.0 += 1;
            self.late.1 += u64::from(steps);
        }
        cx.world.store.release_msg(start);
        cx.world.store.release_msg(model);
        // It waits for its round to close (a barrier), then for the server to draw it again.
        self.idle.push(w);
        cx.block(w);
        let n = self.workers.len() as u32;
        let quorum = cfg.quorum.unwrap_or(cfg.clients_per_round.unwrap_or(n));
        if kept && self.buffered >= quorum {
            self.close_round(cx);
        } else if self.waiting_to_open {
            self.open_round(cx);
        }
    }

    /// The round closes: `x ← x − η_g·Δ̄/k` over the `k` pushes kept, and the next opens.
    fn close_round(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let ServerRule::FedAvg(cfg) = &self.rule else {
            unreachable!("rounds are FedAvg's")
        };
        let (g, d) = (self.global, self.buffer_row());
        if self.buffered > 0 {
            let eta = cfg.server_lr / f64::from(self.buffered);
            let store = &mut cx.world.store;
            store.mix(g, &[(Slot::Row(g), 1.0), (Slot::Row(d), -eta)]);
            store.mix(d, &[(Slot::Row(d), 0.0)]);
            let params = store.num_params() as u64;
            cx.host_work(self.node, HostWork::touch(4 * params));
        }
        self.buffered = 0;
        self.updates += 1;
        self.open_round(cx);
    }

    /// Draws the round's clients among the idle ones (uniformly, from the server's stream) and
    /// sends them the model; with none idle the round opens at the next push.
    fn open_round(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        let ServerRule::FedAvg(cfg) = &self.rule else {
            unreachable!("rounds are FedAvg's")
        };
        let m = cfg
            .clients_per_round
            .map_or(self.workers.len(), |m| m as usize);
        self.idle.retain(|&v| !cx.is_down(v));
        self.idle.sort_unstable();
        if self.idle.is_empty() {
            self.waiting_to_open = true;
            return;
        }
        self.waiting_to_open = false;
        let mut chosen = Vec::new();
        for _ in 0..m.min(self.idle.len()) {
            let i = self.draws.random_range(0..self.idle.len());
            chosen.push(self.idle.remove(i));
        }
        chosen.sort_unstable();
        for &v in &self.idle {
            cx.activity(v, Activity::Idle);
        }
        for v in chosen {
            let round = self.workers[v].round;
            self.reply(v, round, cx);
        }
        self.arm_deadline(cx);
    }

    /// Schedules the open round's deadline, where FedAvg has one.
    pub(super) fn arm_deadline(&mut self, cx: &mut Ctx<'_, '_, Event>) {
        if let ServerRule::FedAvg(cfg) = &self.rule
            && let Some(s) = cfg.deadline_s
        {
            let version = self.updates;
            cx.after(SimTime::from_secs_f64(s), Event::Deadline { version });
        }
    }

    /// The deadline of the round of version `version`: it closes with what came, unless it
    /// closed already.
    pub(super) fn deadline(&mut self, version: u64, cx: &mut Ctx<'_, '_, Event>) {
        if version == self.updates && !self.waiting_to_open {
            self.close_round(cx);
        }
    }
}

use super::ServerRule;
