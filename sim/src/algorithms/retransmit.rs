//! Retransmission on loss, as a reliable transport (TCP under ps-lite's ZeroMQ) would: under
//! `[[faults]]`, a message lost on the network is posted again a timeout after it was posted,
//! as often as needed, unless its link is cut for good ([`crate::fault::Faults::cut_for_good`]),
//! when it is handed back to the method as lost for good (parameter server, [`super::ps`];
//! asynchronous Local-SGD, [`super::async_local_sgd`]).
//!
//! Only a lost message schedules anything (one timer event), so a run without faults, or
//! without a timeout, has exactly its usual events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::algorithm::Ctx;
use crate::clock::time::SimTime;

/// An event type with a timer that posts a lost message again.
pub trait Resend: Copy {
    /// The timer of lost message `id` ([`Retransmit::again`] handles it).
    fn resend(id: u64) -> Self;
}

/// A message posted with [`Retransmit::post`]: enough to post it again.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Posted<E> {
    /// Sender.
    pub src: usize,
    /// Receiver.
    pub dst: usize,
    /// Payload bytes.
    pub bytes: u64,
    /// Its arrival event.
    pub event: E,
}

/// The lost messages of a method that retransmits, and its timeout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Retransmit<E> {
    /// The retransmission timeout (`None`: no faults, nothing is retransmitted).
    timeout: Option<SimTime>,
    /// Lost messages waiting to be posted again.
    lost: BTreeMap<u64, Posted<E>>,
    next: u64,
    /// Messages posted again.
    count: u64,
}

impl<E: Resend> Default for Retransmit<E> {
    fn default() -> Self {
        Retransmit {
            timeout: None,
            lost: BTreeMap::new(),
            next: 0,
            count: 0,
        }
    }
}

impl<E: Resend> Retransmit<E> {
    /// Retransmits lost messages after `timeout` (set for runs with `[[faults]]`).
    pub fn set_timeout(&mut self, timeout: SimTime) {
        self.timeout = Some(timeout);
    }

    /// Messages posted again so far (`retransmissions`).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sends `event` from `src` to `dst`. With a timeout, a lost message is posted again after
    /// it ([`Resend::resend`] is its timer), unless the link is cut for good: then it comes
    /// back, for the method to give up on.
    pub fn post(
        &mut self,
        src: usize,
        dst: usize,
        bytes: u64,
        event: E,
        cx: &mut Ctx<'_, '_, E>,
    ) -> Option<Posted<E>> {
        let sent = cx.send(src, dst, bytes, event);
        let rto = self.timeout?;
        sent.lost?;
        let posted = Posted {
            src,
            dst,
            bytes,
            event,
        };
        if cx.world.faults().cut_for_good(src, dst, cx.now()) {
            return Some(posted);
        }
        let id = self.next;
        self.next += 1;
        self.lost.insert(id, posted);
        cx.after(rto, E::resend(id));
        None
    }

    /// The timer of lost message `id` fired: it is posted again ([`Retransmit::post`]).
    pub fn again(&mut self, id: u64, cx: &mut Ctx<'_, '_, E>) -> Option<Posted<E>> {
        let m = self.lost.remove(&id).expect("a lost message");
        self.count += 1;
        self.post(m.src, m.dst, m.bytes, m.event, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::algorithms::testkit;
    use crate::cluster::ClusterConfig;
    use crate::engine::{Collect, run};

    #[derive(Clone, Copy, Debug)]
    enum Ev {
        Land(u32),
        Timer(u64),
    }

    impl Resend for Ev {
        fn resend(id: u64) -> Self {
            Ev::Timer(id)
        }
    }

    /// Posts messages 0 and 1 from worker 0 to worker 1 at time 0; records what lands, when,
    /// and what comes back lost for good.
    struct Sender {
        rt: Retransmit<Ev>,
        landed: Vec<(u32, u64)>,
        given_up: Vec<u32>,
    }

    impl Sender {
        fn give_up(&mut self, lost: Option<Posted<Ev>>) {
            if let Some(Posted {
                event: Ev::Land(k),
                src: 0,
                dst: 1,
                ..
            }) = lost
            {
                self.given_up.push(k);
            }
        }
    }

    impl Algorithm for Sender {
        type Event = Ev;
        fn start(&mut self, cx: &mut Ctx<'_, '_, Ev>) {
            for k in 0..2 {
                let lost = self.rt.post(0, 1, 1000, Ev::Land(k), cx);
                self.give_up(lost);
            }
        }
        fn handle(&mut self, event: Ev, cx: &mut Ctx<'_, '_, Ev>) {
            match event {
                Ev::Land(k) => self.landed.push((k, cx.now().as_nanos())),
                Ev::Timer(id) => {
                    let lost = self.rt.again(id, cx);
                    self.give_up(lost);
                }
            }
        }
        fn waiting(&self) -> Vec<String> {
            Vec::new()
        }
    }

    /// Two workers, 1 byte per ns, no latency: a message posted at `t` lands at `t + 1 µs`
    /// (the second, queued behind the first, at `t + 2 µs`). Faults from `faults` (TOML),
    /// retransmission after `timeout_us` if given.
    fn send_two(faults: &str, timeout_us: Option<u64>) -> Sender {
        let mut store = testkit::store(2, 5);
        let cluster = ClusterConfig::new(2);
        let mut world = testkit::world(&cluster, &testkit::plain_net(), 2, &mut store, faults);
        let mut rt = Retransmit::default();
        if let Some(us) = timeout_us {
            rt.set_timeout(SimTime::from_nanos(us * 1000));
        }
        let mut alg = Sender {
            rt,
            landed: Vec::new(),
            given_up: Vec::new(),
        };
        let stop = testkit::stop_at(0.01);
        run(&mut alg, &mut world, &stop, &mut Collect::default()).unwrap();
        alg
    }

    /// A message lost while the link loses everything is posted again a timeout after each
    /// posting until one gets through; a message that was not lost is never sent twice.
    #[test]
    fn a_lost_message_is_posted_again_after_the_timeout_until_it_lands() {
        // Everything from 0 to 1 is lost during the first 250 µs: both messages are lost at
        // 0, again at 100 and 200 µs, and land after their posting at 300 µs.
        let loss = "[[faults]]\nkind = \"loss\"\nprobability = 1.0\nlinks = [\"0 -> 1\"]\nstart_s = 0.0\nend_s = 0.00025";
        let alg = send_two(loss, Some(100));
        assert_eq!(alg.rt.count(), 6);
        assert_eq!(alg.landed, vec![(0, 301_000), (1, 302_000)]);
        assert!(alg.given_up.is_empty());
        assert!(alg.rt.lost.is_empty());
        // Without a timeout nothing is posted again: the messages are just lost.
        let alg = send_two(loss, None);
        assert_eq!(alg.rt.count(), 0);
        assert!(alg.landed.is_empty() && alg.given_up.is_empty());
    }

    /// A message lost on a link that is down for good is handed back, not retried.
    #[test]
    fn a_message_on_a_link_down_for_good_comes_back_lost() {
        let down = "[[faults]]\nkind = \"link-down\"\nlinks = [\"0 -> 1\"]\nstart_s = 0.0";
        let alg = send_two(down, Some(100));
        assert_eq!(alg.given_up, vec![0, 1]);
        assert_eq!(alg.rt.count(), 0);
        assert!(alg.landed.is_empty());
    }
}
