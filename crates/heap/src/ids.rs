//! The object-id index: from an HPROF id (an address) to the object's dense index, in 4 bytes
//! per object where the ids allow it.
//!
//! HotSpot's ids are 8-byte-aligned addresses; when all of them are and they span under 32 GB
//! (always with compressed oops), each is kept as `(id - base) / 8` in a `u32`, otherwise as the
//! full `u64`. Lookups are binary searches over the sorted keys; when the file's object order is
//! not already address order, a permutation maps sorted positions back to dense indices.

enum Keys {
    Compact { base: u64, keys: Vec<u32> },
    Wide(Vec<u64>),
}

pub struct IdIndex {
    keys: Keys,
    /// Sorted position -> dense index; empty when the file order is already sorted.
    file_index: Vec<u32>,
}

impl IdIndex {
    /// Builds the index of `ids` (dense index = position); on a duplicate id, returns it.
    pub fn build(mut ids: Vec<u64>) -> Result<IdIndex, u64> {
        let sorted = ids.windows(2).all(|w| w[0] < w[1]);
        let file_index = if sorted {
            Vec::new()
        } else {
            let mut order: Vec<u32> = (0..ids.len() as u32).collect();
            order.sort_unstable_by_key(|&i| ids[i as usize]);
            let by_id: Vec<u64> = order.iter().map(|&i| ids[i as usize]).collect();
            ids = by_id;
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return Err(w[0]);
            }
            order
        };
        let (lo, hi) = (ids.first().copied(), ids.last().copied());
        let keys = match (lo, hi) {
            (Some(lo), Some(hi))
                if (hi - lo) >> 3 <= u64::from(u32::MAX)
                    && ids.iter().all(|&i| i & 7 == lo & 7) =>
            {
                Keys::Compact {
                    base: lo,
                    keys: ids.iter().map(|&i| ((i - lo) >> 3) as u32).collect(),
                }
            }
            _ => Keys::Wide(ids),
        };
        Ok(IdIndex { keys, file_index })
    }

    /// The dense index of the object with this id.
    pub fn get(&self, id: u64) -> Option<u32> {
        let p = match &self.keys {
            Keys::Compact { base, keys } => {
                let d = id.checked_sub(*base)?;
                if d & 7 != 0 || d >> 3 > u64::from(u32::MAX) {
                    return None;
                }
                keys.binary_search(&((d >> 3) as u32)).ok()?
            }
            Keys::Wide(keys) => keys.binary_search(&id).ok()?,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_and_wide_ids_find_their_objects() {
        let aligned = vec![0x7_0000_0040, 0x7_0000_0010, 0x7_0000_0028];
        let ix = IdIndex::build(aligned.clone()).unwrap();
        assert!(matches!(ix.keys, Keys::Compact { .. }));
        assert!(!ix.file_is_sorted());
        for (i, id) in aligned.iter().enumerate() {
            assert_eq!(ix.get(*id), Some(i as u32));
        }
        assert_eq!(ix.get(0x7_0000_0018), None);
        assert_eq!(ix.get(0x7_0000_0011), None);
        assert_eq!(ix.get(0x10), None);
        let odd = vec![1, 2, 3, 1 << 40];
        let ix = IdIndex::build(odd.clone()).unwrap();
        assert!(matches!(ix.keys, Keys::Wide(_)));
        for (i, id) in odd.iter().enumerate() {
            assert_eq!(ix.get(*id), Some(i as u32));
        }
        assert_eq!(IdIndex::build(vec![8, 16, 8]).err(), Some(8));
    }
}
