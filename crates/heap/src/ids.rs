//! The object-id index: from an HPROF id (an address) to the object's dense index, in 4 bytes
//! per object where the ids allow it, in RAM while references are resolved and on disk after.
//!
//! HotSpot's ids are 8-byte-aligned addresses; when all of them are and they span under 32 GB
//! (always with compressed oops), each is kept as `(id - base) / 8` in a `u32`, otherwise as the
//! full `u64`. Lookups find a small range of the sorted keys through a table of bucket starts
//! (the keys' top bits), then search it; when the file's object order is not already address
//! order, a permutation maps sorted positions back to dense indices. Once the graph is built,
//! [`IdIndex::spill`] moves the index to a temporary file for the few lookups that remain.

use crate::error::Result;
use crate::spill::{Spill, SpillWriter};

enum Keys {
    Compact(Vec<u32>),
    Wide(Vec<u64>),
}

impl Keys {
    fn at(&self, p: usize) -> u64 {
        match self {
            Keys::Compact(k) => u64::from(k[p]),
            Keys::Wide(k) => k[p],
        }
    }
}

pub struct IdIndex {
    /// Compact keys are `(id - base) >> 3`, wide keys `id - base`.
    base: u64,
    keys: Keys,
    /// `buckets[b]` is the first sorted position whose key's top bits (`key >> shift`) are at
    /// least `b`; one more entry closes the last bucket.
    buckets: Vec<u32>,
    shift: u32,
    /// Sorted position -> dense index; empty when the file order is already sorted.
    file_index: Vec<u32>,
}

impl IdIndex {
    /// Builds the index of `ids` (dense index = position); on a duplicate id, returns it.
    pub fn build(ids: &Spill<u64>) -> Result<std::result::Result<IdIndex, u64>> {
        let n = ids.len();
        let (mut lo, mut hi, mut sorted, mut low_bits) = (u64::MAX, 0u64, true, None);
        let mut aligned = true;
        let mut prev = None;
        let mut r = ids.reader();
        for _ in 0..n {
            let id = r.next_value()?;
            lo = lo.min(id);
            hi = hi.max(id);
            sorted &= prev.is_none_or(|p| p < id);
            prev = Some(id);
            aligned &= *low_bits.get_or_insert(id & 7) == id & 7;
        }
        let compact = n == 0 || (aligned && (hi - lo) >> 3 <= u64::from(u32::MAX));
        let base = if n == 0 { 0 } else { lo };
        let key = |id: u64| if compact { (id - base) >> 3 } else { id - base };
        let (keys, file_index) = if sorted {
            let keys = if compact {
                Keys::Compact(ids.load_as(|id| key(id) as u32)?)
            } else {
                Keys::Wide(ids.load_as(|id| id - base)?)
            };
            (keys, Vec::new())
        } else if compact {
            // (key, file position) pairs sorted together, then split: the positions go through
            // a spill so that the pairs, the keys and the positions are never all in memory.
            let mut pairs = Vec::with_capacity(n);
            let mut r = ids.reader();
            for i in 0..n as u64 {
                pairs.push(key(r.next_value()?) << 32 | i);
            }
            pairs.sort_unstable();
            if let Some(w) = pairs.windows(2).find(|w| w[0] >> 32 == w[1] >> 32) {
                return Ok(Err(base + ((w[0] >> 32) << 3)));
            }
            let keys: Vec<u32> = pairs.iter().map(|p| (p >> 32) as u32).collect();
            let mut order = SpillWriter::new()?;
            for p in &pairs {
                order.push(*p as u32)?;
            }
            drop(pairs);
            (Keys::Compact(keys), order.finish()?.load()?)
        } else {
            let mut pairs = Vec::with_capacity(n);
            let mut r = ids.reader();
            for i in 0..n as u32 {
                pairs.push((r.next_value()? - base, i));
            }
            pairs.sort_unstable();
            if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
                return Ok(Err(base + w[0].0));
            }
            let keys: Vec<u64> = pairs.iter().map(|p| p.0).collect();
            let order: Vec<u32> = pairs.iter().map(|p| p.1).collect();
            (Keys::Wide(keys), order)
        };
        // About four keys per bucket.
        let top = if n == 0 { 0 } else { keys.at(n - 1) };
        let mut shift = 0;
        while (top >> shift) as usize > n / 4 {
            shift += 1;
        }
        let nb = (top >> shift) as usize + 1;
        let mut buckets = Vec::with_capacity(nb + 1);
        let mut p = 0usize;
        for b in 0..=nb as u64 {
            while p < n && keys.at(p) >> shift < b {
                p += 1;
            }
            buckets.push(p as u32);
        }
        Ok(Ok(IdIndex {
            base,
            keys,
            buckets,
            shift,
            file_index,
        }))
    }

    fn compact(&self) -> bool {
        matches!(self.keys, Keys::Compact(_))
    }

    /// The key of `id`, or `None` when no object can have it.
    fn key(&self, id: u64) -> Option<u64> {
        let d = id.checked_sub(self.base)?;
        if !self.compact() {
            return Some(d);
        }
        if d & 7 != 0 || d >> 3 > u64::from(u32::MAX) {
            return None;
        }
        Some(d >> 3)
    }

    /// The dense index of the object with this id.
    pub fn get(&self, id: u64) -> Option<u32> {
        let k = self.key(id)?;
        let b = usize::try_from(k >> self.shift).ok()?;
        if b + 1 >= self.buckets.len() {
            return None;
        }
        let (from, to) = (self.buckets[b] as usize, self.buckets[b + 1] as usize);
        let p = from
            + match &self.keys {
                Keys::Compact(keys) => keys[from..to].binary_search(&(k as u32)).ok()?,
                Keys::Wide(keys) => keys[from..to].binary_search(&k).ok()?,
            };
        Some(if self.file_index.is_empty() {
            p as u32
        } else {
            self.file_index[p]
        })
    }

    /// Whether the file listed objects in address order.
    pub fn file_is_sorted(&self) -> bool {
        self.file_index.is_empty()
    }

    /// Moves the index to temporary files, for occasional lookups.
    pub fn spill(self) -> Result<SpilledIds> {
        let keys = match &self.keys {
            Keys::Compact(k) => SpilledKeys::Compact(Spill::from_slice(k)?),
            Keys::Wide(k) => SpilledKeys::Wide(Spill::from_slice(k)?),
        };
        let file_index = if self.file_index.is_empty() {
            None
        } else {
            Some(Spill::from_slice(&self.file_index)?)
        };
        let empty = match self.keys {
            Keys::Compact(_) => Keys::Compact(Vec::new()),
            Keys::Wide(_) => Keys::Wide(Vec::new()),
        };
        Ok(SpilledIds {
            lookup: IdIndex {
                keys: empty,
                buckets: Vec::new(),
                file_index: Vec::new(),
                ..self
            },
            keys,
            file_index,
        })
    }
}

enum SpilledKeys {
    Compact(Spill<u32>),
    Wide(Spill<u64>),
}

impl SpilledKeys {
    fn len(&self) -> usize {
        match self {
            SpilledKeys::Compact(k) => k.len(),
            SpilledKeys::Wide(k) => k.len(),
        }
    }

    fn get(&self, p: usize) -> Result<u64> {
        Ok(match self {
            SpilledKeys::Compact(k) => u64::from(k.get(p)?),
            SpilledKeys::Wide(k) => k.get(p)?,
        })
    }
}

/// An [`IdIndex`] on disk: each lookup is a binary search of a few reads.
pub struct SpilledIds {
    /// The index's parameters (its arrays are empty).
    lookup: IdIndex,
    keys: SpilledKeys,
    file_index: Option<Spill<u32>>,
}

impl SpilledIds {
    /// The dense index of the object with this id.
    pub fn get(&self, id: u64) -> Result<Option<u32>> {
        let Some(k) = self.lookup.key(id) else {
            return Ok(None);
        };
        let (mut lo, mut hi) = (0usize, self.keys.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let v = self.keys.get(mid)?;
            if v == k {
                return Ok(Some(match &self.file_index {
                    Some(f) => f.get(mid)?,
                    None => mid as u32,
                }));
            }
            if v < k {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(ids: &[u64]) -> std::result::Result<IdIndex, u64> {
        IdIndex::build(&Spill::from_slice(ids).unwrap()).unwrap()
    }

    #[test]
    fn compact_and_wide_ids_find_their_objects() {
        let aligned = vec![0x7_0000_0040, 0x7_0000_0010, 0x7_0000_0028];
        let ix = index(&aligned).unwrap();
        assert!(ix.compact());
        assert!(!ix.file_is_sorted());
        for (i, id) in aligned.iter().enumerate() {
            assert_eq!(ix.get(*id), Some(i as u32));
        }
        assert_eq!(ix.get(0x7_0000_0018), None);
        assert_eq!(ix.get(0x7_0000_0011), None);
        assert_eq!(ix.get(0x7_0000_0048), None);
        assert_eq!(ix.get(0x10), None);
        let spilled = ix.spill().unwrap();
        for (i, id) in aligned.iter().enumerate() {
            assert_eq!(spilled.get(*id).unwrap(), Some(i as u32));
        }
        assert_eq!(spilled.get(0x7_0000_0018).unwrap(), None);
        let odd = vec![1, 2, 3, 1 << 40];
        let ix = index(&odd).unwrap();
        assert!(!ix.compact());
        assert!(ix.file_is_sorted());
        for (i, id) in odd.iter().enumerate() {
            assert_eq!(ix.get(*id), Some(i as u32));
        }
        assert_eq!(ix.get(4), None);
        assert_eq!(ix.get(0), None);
        let spilled = ix.spill().unwrap();
        for (i, id) in odd.iter().enumerate() {
            assert_eq!(spilled.get(*id).unwrap(), Some(i as u32));
        }
        assert_eq!(index(&[8, 16, 8]).err(), Some(8));
        assert_eq!(index(&[9, 2, 9]).err(), Some(9));
        assert_eq!(index(&[]).unwrap().get(8), None);
    }

    #[test]
    fn many_ids_in_any_order_find_their_objects() {
        let mut ids: Vec<u64> = (0..100_000u64)
            .map(|i| 0x8_0000_0000 + i * 64 + (i % 7) * 8)
            .collect();
        let all: std::collections::HashSet<u64> = ids.iter().copied().collect();
        for (order, sorted) in [(0u64, true), (1, false)] {
            if order == 1 {
                ids.reverse();
                ids.swap(10, 50_000);
            }
            let ix = index(&ids).unwrap();
            assert_eq!(ix.file_is_sorted(), sorted);
            for (i, &id) in ids.iter().enumerate() {
                assert_eq!(ix.get(id), Some(i as u32));
                assert_eq!(
                    ix.get(id + 8).map(|j| ids[j as usize]),
                    Some(id + 8).filter(|x| all.contains(x))
                );
            }
        }
    }
}
