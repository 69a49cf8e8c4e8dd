//! The event queue: events ordered by `(time, sequence)`.
//!
//! The sequence number is handed out when an event is scheduled, so events due at the same
//! simulated instant are delivered in the order they were scheduled. Nothing else — no hash, no
//! pointer, no thread timing — decides the order, which is what makes a run reproducible.
//!
//! ```
//! use dasim_sim::engine::EventQueue;
//! use dasim_sim::time::SimTime;
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

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::SimTime;

/// A priority queue of future events.
///
/// The heap orders small keys — `(time, sequence, slot)`, 24 bytes — and the events wait in a
/// slab beside it, so that sifting moves keys, not events (an algorithm's event is often 40
/// bytes or more). Slots are reused; the sequence number alone breaks ties.
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(SimTime, u64, u32)>>,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
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
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
        }
    }

    /// Schedules `event` at `time`; returns its sequence number.
    pub fn push(&mut self, time: SimTime, event: E) -> u64 {
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
        self.heap.push(Reverse((time, seq, slot)));
        seq
    }

    /// Removes and returns the earliest event.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let Reverse((time, _, slot)) = self.heap.pop()?;
        self.free.push(slot);
        let event = self.slab[slot as usize]
            .take()
            .expect("a queued slot holds its event");
        Some((time, event))
    }

    /// The time of the earliest event, if any.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.0.0)
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
