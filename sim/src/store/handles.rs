//! [`HandleMap`]: values by handle, for the stores' gradients and message buffers.
//!
//! Stores number their handles ([`crate::store::GradId`], [`crate::store::MsgId`]) from
//! counters, and a run looks them up several times per event: at 1,024 workers a message is made,
//! read and released a million times a simulated second. A `BTreeMap` pays a walk down its
//! nodes for each; this map pays one hash probe. It holds the staleness recorder's tables
//! ([`crate::store::Tracked`]), the exact store's gradients and message buffers
//! ([`crate::store::ReferenceStore`]) and the burn store's message buffers.

use serde::{Deserialize, Serialize};

/// Values by handle: a hash index from handle to slot, and the values in a slab of slots.
///
/// Every lookup is a hash probe, `O(1)` however the live handles are spread (a straggler's
/// gradient kept while thousands after it come and go costs nothing), and memory is in
/// proportion to the most handles live at once. The index is its own, open addressing with
/// linear probing and Fibonacci hashing: a few lines that take fewer instructions than a
/// general-purpose map, and need no exception to the workspace's rule against `HashMap`
/// (`sim/clippy.toml`).
///
/// Nothing about a run may depend on the slab's order, which depends on the history of
/// insertions and removals: [`HandleMap::values`] is for what does not care about order (a
/// minimum, a sum, a count), and a checkpoint keeps the entries by increasing handle (serde
/// sees a `Vec<(u64, V)>` in that order), so it is the same whatever that history.
///
/// ```
/// use dasim_sim::store::HandleMap;
///
/// let mut buffers = HandleMap::new();
/// for id in [7, 3, 1 << 40] {
///     buffers.insert(id, vec![id as f32; 2]);
/// }
/// assert_eq!(buffers.remove(3), Some(vec![3.0; 2]));
/// assert_eq!(buffers.get(7), Some(&vec![7.0; 2]));
/// assert_eq!(buffers.get(3), None);
/// let ids: Vec<u64> = buffers.sorted().into_iter().map(|(id, _)| id).collect();
/// assert_eq!(ids, [7, 1 << 40]);
/// ```
#[derive(Clone, Serialize, Deserialize)]
#[serde(
    into = "Vec<(u64, V)>",
    from = "Vec<(u64, V)>",
    bound(
        serialize = "V: Clone + Serialize",
        deserialize = "V: Deserialize<'de>"
    )
)]
pub struct HandleMap<V> {
    /// The slot of every live handle.
    index: Index,
    /// Values by slot (`None`: free).
    vals: Vec<Option<V>>,
    /// Free slots, reused last freed first.
    free: Vec<u32>,
}

/// The slot of each live handle: open addressing with linear probing, at most half full, in a
/// power-of-two array of `(handle, slot)` cells. A handle's home cell is the top bits of its
/// product with the golden ratio (Fibonacci hashing): the stores number handles from counters,
/// consecutive or strided, and the products spread both evenly. A removal shifts the cells
/// after it back (no tombstones), so probes stay short whatever the history.
#[derive(Clone)]
struct Index {
    cells: Vec<(u64, u32)>,
    /// `64 − log2(cells.len())`.
    shift: u32,
    len: usize,
}

/// The slot of an empty cell.
const VACANT: u32 = u32::MAX;

impl Default for Index {
    fn default() -> Self {
        Index {
            cells: vec![(0, VACANT); 8],
            shift: 64 - 3,
            len: 0,
        }
    }
}

impl Index {
    fn home(&self, id: u64) -> usize {
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    fn mask(&self) -> usize {
        self.cells.len() - 1
    }

    /// The cell holding `id`, or the empty cell where it would go.
    fn find(&self, id: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(id);
        loop {
            let (key, slot) = self.cells[i];
            if slot == VACANT {
                return (i, false);
            }
            if key == id {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    fn get(&self, id: u64) -> Option<u32> {
        match self.find(id) {
            (i, true) => Some(self.cells[i].1),
            _ => None,
        }
    }

    /// The cell of `id` and whether it holds it; when it does not, the empty cell where it
    /// goes, with room for it (the array grown first if needed, so the cell stays valid).
    fn entry(&mut self, id: u64) -> (usize, bool) {
        if 2 * (self.len + 1) > self.cells.len() {
            self.grow();
        }
        self.find(id)
    }

    /// Fills the empty cell `i` found by [`Index::entry`] with `id` at `slot`.
    fn fill(&mut self, i: usize, id: u64, slot: u32) {
        debug_assert!(slot != VACANT && self.cells[i].1 == VACANT);
        self.cells[i] = (id, slot);
        self.len += 1;
    }

    fn remove(&mut self, id: u64) -> Option<u32> {
        let (mut hole, found) = self.find(id);
        if !found {
            return None;
        }
        let slot = self.cells[hole].1;
        // Backward shift: a later cell of the run moves into the hole when its home does not
        // lie cyclically after the hole (it would not be found past the hole otherwise).
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let (key, s) = self.cells[j];
            if s == VACANT {
                break;
            }
            let home = self.home(key);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.cells[hole] = self.cells[j];
                hole = j;
            }
        }
        self.cells[hole] = (0, VACANT);
        self.len -= 1;
        Some(slot)
    }

    fn grow(&mut self) {
        let cells = vec![(0, VACANT); 2 * self.cells.len()];
        let old = std::mem::replace(&mut self.cells, cells);
        self.shift -= 1;
        for (id, slot) in old.into_iter().filter(|&(_, s)| s != VACANT) {
            let (i, _) = self.find(id);
            self.cells[i] = (id, slot);
        }
    }

    /// The live `(handle, slot)` pairs, in no meaningful order.
    fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.cells.iter().copied().filter(|&(_, s)| s != VACANT)
    }
}

impl<V> Default for HandleMap<V> {
    fn default() -> Self {
        HandleMap {
            index: Index::default(),
            vals: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<V> FromIterator<(u64, V)> for HandleMap<V> {
    fn from_iter<I: IntoIterator<Item = (u64, V)>>(entries: I) -> Self {
        let mut t = HandleMap::default();
        for (id, v) in entries {
            t.insert(id, v);
        }
        t
    }
}

impl<V> From<Vec<(u64, V)>> for HandleMap<V> {
    fn from(entries: Vec<(u64, V)>) -> Self {
        entries.into_iter().collect()
    }
}

impl<V: Clone> From<HandleMap<V>> for Vec<(u64, V)> {
    /// The live entries by increasing handle.
    fn from(t: HandleMap<V>) -> Self {
        t.sorted()
            .into_iter()
            .map(|(id, v)| (id, v.clone()))
            .collect()
    }
}

impl<V> HandleMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the value of `id`, returning the one it replaces.
    pub fn insert(&mut self, id: u64, value: V) -> Option<V> {
        let (i, found) = self.index.entry(id);
        if found {
            return self.vals[self.index.cells[i].1 as usize].replace(value);
        }
        let k = match self.free.pop() {
            Some(k) => {
                self.vals[k as usize] = Some(value);
                k
            }
            None => {
                self.vals.push(Some(value));
                u32::try_from(self.vals.len() - 1)
                    .ok()
                    .filter(|&k| k != VACANT)
                    .expect("fewer than 2^32 − 1 live handles")
            }
        };
        self.index.fill(i, id, k);
        None
    }

    /// The value of `id`.
    pub fn get(&self, id: u64) -> Option<&V> {
        self.slot(id).and_then(|k| self.at(k))
    }

    /// The value of `id`, to change.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        self.slot(id).and_then(|k| self.at_mut(k))
    }

    /// Removes `id`, returning its value.
    pub fn remove(&mut self, id: u64) -> Option<V> {
        let k = self.index.remove(id)?;
        self.free.push(k);
        self.vals[k as usize].take()
    }

    /// Live handles.
    pub fn len(&self) -> usize {
        self.index.len
    }

    /// Whether no handle is live.
    pub fn is_empty(&self) -> bool {
        self.index.len == 0
    }

    /// The live values, in no meaningful order (see [`HandleMap`]).
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.vals.iter().flatten()
    }

    /// The live entries by increasing handle.
    pub fn sorted(&self) -> Vec<(u64, &V)> {
        let mut entries: Vec<(u64, &V)> = self
            .index
            .iter()
            .filter_map(|(id, k)| Some((id, self.vals[k as usize].as_ref()?)))
            .collect();
        entries.sort_unstable_by_key(|(id, _)| *id);
        entries
    }

    /// The slot of `id`, if it holds a value: found once, for several reads and writes of one
    /// value with other work between them ([`HandleMap::at`], [`HandleMap::at_mut`]).
    pub(crate) fn slot(&self, id: u64) -> Option<usize> {
        self.index.get(id).map(|k| k as usize)
    }

    /// The value in slot `k` ([`HandleMap::slot`]).
    pub(crate) fn at(&self, k: usize) -> Option<&V> {
        self.vals[k].as_ref()
    }

    /// The value in slot `k` ([`HandleMap::slot`]), to change.
    pub(crate) fn at_mut(&mut self, k: usize) -> Option<&mut V> {
        self.vals[k].as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle kept while thousands after it come and go: the map holds the live handles'
    /// values only, reusing the slots of the released ones.
    #[test]
    fn a_map_holds_its_live_handles_only() {
        let mut t: HandleMap<u64> = HandleMap::default();
        for id in 0..1000 {
            t.insert(id, id * 10);
        }
        for id in 2..1000 {
            if id % 100 != 0 {
                assert_eq!(t.remove(id), Some(id * 10));
            }
        }
        assert_eq!(t.len(), 11);
        for id in 1000..100_000 {
            t.insert(id, id * 10);
            assert_eq!(t.remove(id - 1).is_some(), id > 1000);
        }
        assert_eq!(t.len(), 12);
        assert!(t.vals.len() <= 1000, "{} slots", t.vals.len());
        for id in (0..1000).chain([99_999]) {
            let live = id < 2 || id % 100 == 0 || id == 99_999;
            assert_eq!(t.get(id).copied(), live.then_some(id * 10), "{id}");
        }
        t.insert(50, 7);
        t.insert(50, 8);
        assert_eq!(t.get(50), Some(&8));
        assert_eq!(t.values().count(), 13);
    }

    /// Handles in strides of powers of two (stores that number several kinds of handle from one
    /// counter give such), removed in another order than inserted: every live one is still
    /// found after removals shifted the cells after them back, and no removed one is.
    #[test]
    fn the_index_finds_strided_handles_after_removals_out_of_order() {
        for stride in [1u64, 2, 8, 64, 1024, 1 << 40] {
            let mut t: HandleMap<u64> = HandleMap::default();
            let ids: Vec<u64> = (0..5000).map(|i| i * stride).collect();
            for &id in &ids {
                t.insert(id, id ^ 1);
            }
            for &id in ids.iter().rev().step_by(3) {
                assert_eq!(t.remove(id), Some(id ^ 1), "stride {stride}: remove {id}");
            }
            for (k, &id) in ids.iter().enumerate() {
                let removed = (ids.len() - 1 - k).is_multiple_of(3);
                assert_eq!(
                    t.get(id).copied(),
                    (!removed).then_some(id ^ 1),
                    "stride {stride}: {id}"
                );
            }
            assert_eq!(t.len(), ids.len() - ids.len().div_ceil(3));
            // Removed handles come back, to reused slots.
            for &id in ids.iter().rev().step_by(3) {
                t.insert(id, id);
            }
            assert_eq!(t.len(), ids.len());
            assert_eq!(t.vals.len(), ids.len());
        }
    }

    /// Random inserts, replacements and removals agree with a map, and a checkpoint keeps the
    /// live entries by increasing handle, the same however the slab was laid out.
    #[test]
    fn a_map_agrees_with_a_map_and_saves_in_handle_order() {
        use rand::{Rng, SeedableRng};
        use std::collections::BTreeMap;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut t: HandleMap<u32> = HandleMap::default();
        let mut reference = BTreeMap::new();
        let mut next = 0u64;
        for step in 0..20_000u32 {
            match rng.random_range(0..4) {
                0 | 1 => {
                    next += rng.random_range(1..4);
                    t.insert(next, step);
                    reference.insert(next, step);
                }
                2 => {
                    let id = rng.random_range(0..next + 2);
                    assert_eq!(t.remove(id), reference.remove(&id), "remove {id}");
                }
                _ => {
                    let id = rng.random_range(0..next + 2);
                    assert_eq!(t.get(id), reference.get(&id), "get {id}");
                }
            }
            assert_eq!(t.len(), reference.len());
        }
        let saved: Vec<(u64, u32)> = t.clone().into();
        assert_eq!(saved, reference.clone().into_iter().collect::<Vec<_>>());
        // Restored, it finds the same values; built in another order, it saves the same.
        let restored = HandleMap::from(saved.clone());
        for (&id, v) in &reference {
            assert_eq!(restored.get(id), Some(v));
        }
        let reversed = HandleMap::from(saved.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(Vec::from(reversed), saved);
    }
}
