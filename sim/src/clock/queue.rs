//! The event queue: events ordered by `(time, sequence)`.
//!
//! The sequence number is handed out when an event is scheduled, so events due at the same
//! simulated instant are delivered in the order they were scheduled. Nothing else — no hash, no
//! pointer, no thread timing — decides the order, which is what makes a run reproducible.
//!
//! ```
//! use dasim_sim::engine::EventQueue;
//! use dasim_sim::clock::time::SimTime;
//!
//! let mut q = EventQueue::new();
//! q.push(SimTime::from_nanos(5), "late");
//! q.push(SimTime::from_nanos(1), "first");
//! q.push(SimTime::from_nanos(5), "later, same time");
//! assert_eq!(q.pop(), Some((SimTime::from_nanos(1), "first")));
//! assert_eq!(q.pop(), Some((SimTime::from_nanos(5), "late")));
//! assert_eq!(q.pop(), Some((SimTime::from_nanos(5), "later, same time")));
//! assert_eq!(q.pop(), None);
//! ```

use serde::{Deserialize, Serialize};

use crate::clock::time::SimTime;

/// Buckets of the radix heap: one for the current time, one per bit of the time.
const BUCKETS: usize = 65;

/// A priority queue of future events.
///
/// A radix heap ([Ahuja, Mehlhorn, Orlin and Tarjan, 1990](https://doi.org/10.1145/77600.77615)),
/// which needs what a simulation guarantees: no event is scheduled before the last one taken.
/// An event at time `t` waits in the bucket of the highest bit in which `t` differs from that
/// last time; taking the next event empties the lowest non-empty bucket into lower ones, so each
/// event moves a few times at most, whatever the number pending. The events due at the current
/// time wait in their own bucket in sequence order, so ties break by scheduling order. Events
/// live in a slab; buckets hold 24-byte keys.
#[derive(Serialize, Deserialize)]
pub struct EventQueue<E> {
    /// The time of the events in `current` (and a lower bound of every other).
    last: u64,
    /// Events due at `last`: `(sequence, slot)` in sequence order, from `head` on (a vector
    /// read from the front, emptied once drained: cheaper than a ring buffer's wrapping).
    current: Vec<(u64, u32)>,
    /// The next event of `current` to take.
    head: usize,
    /// `buckets[i]`, `i ≥ 1`: events whose time first differs from `last` in bit `i − 1`.
    buckets: Vec<Vec<(u64, u64, u32)>>,
    /// Bit `i` set when `buckets[i]` is not empty: the next bucket to empty is found in one
    /// instruction instead of a scan over the buckets' headers.
    filled: u64,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
    len: usize,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self {
            last: 0,
            current: Vec::new(),
            head: 0,
            buckets: vec![Vec::new(); BUCKETS],
            filled: 0,
            slab: Vec::new(),
            free: Vec::new(),
            len: 0,
            next_seq: 0,
        }
    }

    fn bucket(&self, time: u64) -> usize {
        (u64::BITS - (time ^ self.last).leading_zeros()) as usize
    }

    /// Schedules `event` at `time`; returns its sequence number.
    ///
    /// # Panics
    /// In debug builds, if `time` lies before the last event taken.
    pub fn push(&mut self, time: SimTime, event: E) -> u64 {
        let t = time.as_nanos();
        debug_assert!(
            t >= self.last,
            "an event cannot be scheduled before the current one"
        );
        let t = t.max(self.last);
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot as usize] = Some(event);
                slot
            }
            None => {
                self.slab.push(Some(event));
                u32::try_from(self.slab.len() - 1).expect("fewer than 2^32 pending events")
            }
        };
        match self.bucket(t) {
            // The largest sequence number so far: the back keeps the order.
            0 => self.current.push((seq, slot)),
            b => {
                self.buckets[b].push((t, seq, slot));
                self.filled |= 1 << (b - 1);
            }
        }
        self.len += 1;
        seq
    }

    /// Makes `current` hold the earliest events, if any are pending.
    fn refill(&mut self) {
        if self.head < self.current.len() || self.len == 0 {
            return;
        }
        // `pop` empties the vector once it is drained.
        debug_assert!(self.current.is_empty() && self.head == 0);
        debug_assert!(self.filled != 0, "a pending event is in some bucket");
        let b = self.filled.trailing_zeros() as usize + 1;
        self.filled &= !(1 << (b - 1));
        let items = std::mem::take(&mut self.buckets[b]);
        self.last = items.iter().map(|&(t, _, _)| t).min().expect("not empty");
        for &(t, seq, slot) in &items {
            match self.bucket(t) {
                0 => self.current.push((seq, slot)),
                lower => {
                    self.buckets[lower].push((t, seq, slot));
                    self.filled |= 1 << (lower - 1);
                }
            }
        }
        // Due events of one bucket come in the order they were pushed there, which is not
        // the sequence order when some came down from higher buckets.
        if self.current.len() > 1 {
            self.current.sort_unstable();
        }
        // Keep the emptied bucket's allocation.
        let mut items = items;
        items.clear();
        self.buckets[b] = items;
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        self.refill();
        let &(_, slot) = self.current.get(self.head)?;
        self.head += 1;
        if self.head == self.current.len() {
            // Drained: start again at the front, so that a chain of events at one instant
            // (each scheduling the next) does not grow the vector.
            self.current.clear();
            self.head = 0;
        }
        self.len -= 1;
        self.free.push(slot);
        let event = self.slab[slot as usize]
            .take()
            .expect("a queued slot holds its event");
        Some((SimTime::from_nanos(self.last), event))
    }

    /// The time of the earliest event, if any.
    pub fn peek_time(&mut self) -> Option<SimTime> {
        self.refill();
        (self.head < self.current.len()).then_some(SimTime::from_nanos(self.last))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes and pops interleaved as a simulation does them (never before the last event
    /// taken, many ties, times spread over many bits) come out in `(time, sequence)` order.
    #[test]
    fn interleaved_pushes_and_pops_come_out_in_time_then_sequence_order() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut q = EventQueue::new();
        let mut reference = std::collections::BTreeMap::new();
        let mut now = 0u64;
        let mut taken = 0;
        for round in 0..20_000u64 {
            for _ in 0..rng.random_range(0..3) {
                let delay = match rng.random_range(0..4) {
                    0 => 0,
                    1 => rng.random_range(0..4),
                    2 => rng.random_range(0..1_000),
                    _ => rng.random_range(0..1u64 << 40),
                };
                let seq = q.push(SimTime::from_nanos(now + delay), round);
                reference.insert((now + delay, seq), round);
            }
            if rng.random_bool(0.5) {
                let expect = reference.pop_first();
                assert_eq!(
                    q.peek_time(),
                    expect.map(|((t, _), _)| SimTime::from_nanos(t))
                );
                let got = q.pop();
                assert_eq!(got, expect.map(|((t, _), e)| (SimTime::from_nanos(t), e)));
                if let Some((t, _)) = got {
                    now = t.as_nanos();
                    taken += 1;
                }
            }
            assert_eq!(q.len(), reference.len());
        }
        assert!(taken > 5_000);
        while let Some(((t, _), e)) = reference.pop_first() {
            assert_eq!(q.pop(), Some((SimTime::from_nanos(t), e)));
        }
        assert!(q.is_empty());
    }

    /// A chain of events at one instant, each scheduling the next, keeps the vector of due
    /// events as short as the events pending.
    #[test]
    fn a_chain_at_one_instant_stays_short() {
        let mut q = EventQueue::new();
        let t = SimTime::from_nanos(7);
        q.push(t, 0u32);
        for i in 1..100_000 {
            assert_eq!(q.pop(), Some((t, i - 1)));
            q.push(t, i);
            assert!(q.current.len() - q.head <= 1 && q.current.len() <= 2);
        }
        assert_eq!(q.pop(), Some((t, 99_999)));
        assert!(q.is_empty());
    }

    #[test]
    fn ties_break_by_scheduling_order() {
        let mut q = EventQueue::new();
        for i in 0..100u32 {
            q.push(SimTime::from_nanos(u64::from(i % 3)), i);
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        let mut expected: Vec<u32> = (0..100).collect();
        expected.sort_by_key(|i| (i % 3, *i));
        assert_eq!(order, expected);
    }
}
