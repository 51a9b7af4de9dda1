//! What redb's writer thread does with the chunks: stores them as they came ([`commit`]), rolls
//! old ones up per minute and thins expired ones ([`maintain`]), deletes a VM ([`delete_vm`]).
//! Rollups and thinning are built from the records themselves (`records::merge`), so every id
//! a later chunk refers to keeps its meaning.

use super::{
    CHUNKS, LARGE, MAX_ROLLUP_CHUNKS, META, MINUTE_MS, ROLLED, SEQS, SNAPSHOTS, VMS, decode_vm,
};
use crate::store::merge::merge_profiles;
use crate::store::queue::{Ledger, Write};
use crate::store::replay::starts_stream;
use crate::store::types::{Maintained, Retention};
use jvmprof_profile::records::{self, RecordWriter, Replay};
use redb::{Database, ReadableTable};
use std::collections::{HashMap, HashSet};

/// What a stored chunk is.
const CHUNK: u8 = 0;
/// Several chunks of one minute merged into one.
const ROLLUP: u8 = 1;
/// Expired chunks reduced to their definitions: no values, in no time range.
const THIN: u8 = 2;
/// Flag on the kind: the bytes are in [`LARGE`] under the same key.
const EXTERNAL: u8 = 0x80;
/// Chunks longer than this are kept in [`LARGE`]: a long value among short ones makes redb
/// split every later leaf of the table after one entry (measured: 36,000 short chunks of ten
/// VMs behind one 100 KB chunk each took 32,700 leaf pages instead of 2,993).
const INLINE_MAX: usize = 1024;

type Table<'t> = redb::Table<'t, (u64, u64), &'static [u8]>;

/// Stores a chunk (inline or in [`LARGE`]).
fn put(
    chunks: &mut Table<'_>,
    large: &mut Table<'_>,
    key: (u64, u64),
    (start, end, kind): (u64, u64, u8),
    bytes: &[u8],
) -> anyhow::Result<()> {
    if bytes.len() > INLINE_MAX {
        large.insert(key, bytes)?;
        chunks.insert(
            key,
            Stored::write(start, end, kind | EXTERNAL, &[]).as_slice(),
        )?;
    } else {
        chunks.insert(key, Stored::write(start, end, kind, bytes).as_slice())?;
    }
    Ok(())
}

/// Removes a chunk, wherever its bytes are.
fn remove(chunks: &mut Table<'_>, large: &mut Table<'_>, key: (u64, u64)) -> anyhow::Result<()> {
    chunks.remove(key)?;
    large.remove(key)?;
    Ok(())
}

/// A stored chunk's bytes, from [`LARGE`] when they are kept there.
pub(super) fn bytes_of(
    stored: &Stored<'_>,
    large: &impl ReadableTable<(u64, u64), &'static [u8]>,
    key: (u64, u64),
) -> anyhow::Result<Vec<u8>> {
    if !stored.external {
        return Ok(stored.bytes.to_vec());
    }
    match large.get(key)? {
        Some(v) => Ok(v.value().to_vec()),
        None => anyhow::bail!("chunk {key:?} is missing its bytes"),
    }
}

/// A stored value: the times its samples were taken in (Unix ms; a chunk's is when the agent
/// cut it, a rollup's its minute) and the framed record chunks.
pub(super) struct Stored<'a> {
    pub start: u64,
    pub end: u64,
    pub kind: u8,
    /// The bytes are in [`LARGE`] (see [`bytes_of`]); `bytes` is empty.
    pub external: bool,
    pub bytes: &'a [u8],
}

impl<'a> Stored<'a> {
    pub fn read(v: &'a [u8]) -> anyhow::Result<Stored<'a>> {
        anyhow::ensure!(v.len() >= 17, "a stored chunk of {} bytes", v.len());
        let u = |i: usize| u64::from_le_bytes(v[i..i + 8].try_into().unwrap_or_default());
        let stored = Stored {
            start: u(0),
            end: u(8),
            kind: v[16] & !EXTERNAL,
            external: v[16] & EXTERNAL != 0,
            bytes: &v[17..],
        };
        // A thinned chunk adds nothing to any range.
        Ok(if stored.kind == THIN {
            Stored {
                start: u64::MAX,
                end: 0,
                ..stored
            }
        } else {
            stored
        })
    }

    fn write(start: u64, end: u64, kind: u8, bytes: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(17 + bytes.len());
        v.extend_from_slice(&start.to_le_bytes());
        v.extend_from_slice(&end.to_le_bytes());
        v.push(kind);
        v.extend_from_slice(bytes);
        v
    }
}

fn encode<T: serde::Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).unwrap_or_default()
}

/// Writes `writes` in one transaction, then records the chunks as committed and answers the
/// barriers.
pub(super) fn commit(db: &Database, ledger: &Ledger, writes: Vec<Write>) -> anyhow::Result<()> {
    let mut barriers = Vec::new();
    let mut newest: HashMap<u64, u64> = HashMap::new();
    let w = db.begin_write()?;
    {
        let mut vms = w.open_table(VMS)?;
        let mut chunks = w.open_table(CHUNKS)?;
        let mut large = w.open_table(LARGE)?;
        let mut snapshots = w.open_table(SNAPSHOTS)?;
        let mut seqs = w.open_table(SEQS)?;
        let mut meta = w.open_table(META)?;
        for write in writes {
            match write {
                Write::Vm(vm) => {
                    vms.insert(vm.id, encode(&vm).as_slice())?;
                    let next = meta.get("next_vm_id")?.map_or(1, |v| v.value());
                    if vm.id >= next {
                        meta.insert("next_vm_id", vm.id + 1)?;
                    }
                }
                Write::Chunk {
                    vm,
                    seq,
                    time_unix_ms,
                    bytes,
                } => {
                    let at = (time_unix_ms, time_unix_ms, CHUNK);
                    put(&mut chunks, &mut large, (vm, seq), at, &bytes)?;
                    let had = seqs.get(vm)?.map_or(0, |v| v.value());
                    if seq > had {
                        seqs.insert(vm, seq)?;
                    }
                    let n = newest.entry(vm).or_insert(0);
                    *n = (*n).max(seq);
                }
                Write::Snapshot { vm, snapshot } => {
                    snapshots.insert(vm, encode(&snapshot).as_slice())?;
                }
                Write::Barrier(tx) => barriers.push(tx),
            }
        }
    }
    w.commit()?;
    ledger.commit(newest);
    for b in barriers {
        let _ = b.send(());
    }
    Ok(())
}

/// Deletes `vm` and everything stored of it, in transaction `w`.
pub(super) fn delete_vm(w: &redb::WriteTransaction, vm: u64) -> anyhow::Result<()> {
    w.open_table(VMS)?.remove(vm)?;
    w.open_table(SNAPSHOTS)?.remove(vm)?;
    w.open_table(SEQS)?.remove(vm)?;
    w.open_table(ROLLED)?.remove(vm)?;
    w.open_table(CHUNKS)?
        .retain_in((vm, 0)..=(vm, u64::MAX), |_, _| false)?;
    w.open_table(LARGE)?
        .retain_in((vm, 0)..=(vm, u64::MAX), |_, _| false)?;
    Ok(())
}

/// A stored chunk read out for maintenance.
struct Old {
    seq: u64,
    start: u64,
    end: u64,
    kind: u8,
    bytes: Vec<u8>,
}

/// Merges chunks into one stream-continuing chunk, or, when each is a stream of its own (sample
/// batches of older agents, pushed profiles), replays them into one profile written as one
/// stream. `None` when they are neither (a gap, or streams that continue).
fn rollup(parts: &[&[u8]]) -> Option<Vec<u8>> {
    if let Ok(merged) = records::merge::merge(parts) {
        return Some(merged);
    }
    if !parts.iter().all(|p| starts_stream(p)) {
        return None;
    }
    let mut profiles = Vec::new();
    for part in parts {
        let mut r = Replay::without_timeline();
        records::replay::apply_all(&mut r, part).ok()?;
        profiles.push(r.finish().ok()?.0);
    }
    let p = merge_profiles(profiles)?.finish();
    let everything = records::write::everything(&p);
    RecordWriter::new()
        .update(&p, &everything, &[], false)
        .ok()
        .filter(|b| !b.is_empty())
}

/// One maintenance pass (see [`crate::store::Store::maintain`]), in one transaction.
pub(super) fn maintain(
    db: &Database,
    now: u64,
    retention: Retention,
    connected: &HashSet<u64>,
) -> anyhow::Result<Maintained> {
    let mut done = Maintained::default();
    let w = db.begin_write()?;
    {
        let rollup_before = now.saturating_sub(retention.rollup_after.as_millis() as u64);
        let cutoff = retention
            .keep
            .map(|keep| now.saturating_sub(keep.as_millis() as u64));
        let mut chunks = w.open_table(CHUNKS)?;
        let mut large = w.open_table(LARGE)?;
        let mut rolled = w.open_table(ROLLED)?;
        let vms: Vec<u64> = w
            .open_table(VMS)?
            .iter()?
            .filter_map(|e| e.ok().map(|(k, _)| k.value()))
            .collect();
        for vm in vms {
            let from = rolled.get(vm)?.map_or(0, |v| v.value());
            // The VM's chunks not rolled up yet and old enough, in order (a prefix: later ones
            // wait until they are old enough too).
            let mut old: Vec<Old> = Vec::new();
            for e in chunks.range((vm, from + 1)..=(vm, u64::MAX))? {
                let (k, v) = e?;
                let s = Stored::read(v.value())?;
                if s.kind == CHUNK && s.start >= rollup_before {
                    break;
                }
                if done.rolled_up + old.len() >= MAX_ROLLUP_CHUNKS {
                    done.more = true;
                    break;
                }
                old.push(Old {
                    seq: k.value().1,
                    start: s.start,
                    end: s.end,
                    kind: s.kind,
                    bytes: bytes_of(&s, &large, k.value())?,
                });
            }
            let Some(last) = old.last().map(|o| o.seq) else {
                continue;
            };
            // Runs of chunks of one minute.
            let mut i = 0;
            while i < old.len() {
                let minute = old[i].start / MINUTE_MS;
                let mut j = i + 1;
                while j < old.len() && old[j].kind == CHUNK && old[j].start / MINUTE_MS == minute {
                    j += 1;
                }
                let run = &old[i..j];
                if run.len() > 1 && run[0].kind == CHUNK {
                    let parts: Vec<&[u8]> = run.iter().map(|o| o.bytes.as_slice()).collect();
                    if let Some(merged) = rollup(&parts) {
                        for o in run {
                            remove(&mut chunks, &mut large, (vm, o.seq))?;
                        }
                        let start = minute * MINUTE_MS;
                        let at = (start, start + MINUTE_MS - 1, ROLLUP);
                        put(&mut chunks, &mut large, (vm, run[0].seq), at, &merged)?;
                        done.rolled_up += run.len();
                        done.rollups += 1;
                    }
                }
                i = j;
            }
            rolled.insert(vm, last)?;
        }
        if let Some(cutoff) = cutoff {
            done.expired = expire(&mut chunks, &mut large, cutoff)?;
            let vms = w.open_table(VMS)?;
            for e in vms.iter()? {
                let (k, v) = e?;
                let record = decode_vm(v.value())?;
                if record.last_seen < cutoff && !connected.contains(&k.value()) {
                    done.removed_vms.push(k.value());
                }
            }
        }
    }
    for vm in &done.removed_vms {
        delete_vm(&w, *vm)?;
    }
    w.commit()?;
    Ok(done)
}

/// Every VM's chunks whose samples are all older than `cutoff`: thinned into one chunk of
/// definitions (later chunks still refer to them), or deleted when they are streams of their
/// own. Returns how many chunks expired.
fn expire(chunks: &mut Table<'_>, large: &mut Table<'_>, cutoff: u64) -> anyhow::Result<usize> {
    // Runs of consecutive expired chunks of a VM (a thinned one counts as expired).
    let mut expired: Vec<(u64, Vec<Old>)> = Vec::new();
    let mut open = false;
    for e in chunks.iter()? {
        let (k, v) = e?;
        let (vm, seq) = k.value();
        let s = Stored::read(v.value())?;
        if s.kind != THIN && s.end >= cutoff {
            open = false;
            continue;
        }
        if !open || expired.last().is_none_or(|(v, _)| *v != vm) {
            expired.push((vm, Vec::new()));
            open = true;
        }
        let Some((_, run)) = expired.last_mut() else {
            continue;
        };
        run.push(Old {
            seq,
            start: s.start,
            end: s.end,
            kind: s.kind,
            bytes: bytes_of(&s, &*large, (vm, seq))?,
        });
    }
    let mut n = 0;
    for (vm, list) in expired {
        // Nothing new expired: a lone thinned chunk stays as it is.
        if list.is_empty() || (list.len() == 1 && list[0].kind == THIN) {
            continue;
        }
        let next = chunks
            .range((vm, list[list.len() - 1].seq + 1)..=(vm, u64::MAX))?
            .next()
            .transpose()?
            .map(|(k, v)| {
                Stored::read(v.value())
                    .and_then(|s| bytes_of(&s, &*large, k.value()))
                    .map(|b| starts_stream(&b))
            })
            .transpose()?;
        let parts: Vec<&[u8]> = list.iter().map(|o| o.bytes.as_slice()).collect();
        // Whole streams go; a stream that goes on keeps its definitions.
        let whole = starts_stream(parts[0]) && next.unwrap_or(true);
        let thin = if whole {
            None
        } else {
            match records::merge::thin(&parts) {
                Ok(t) => Some(t),
                Err(_) => continue,
            }
        };
        for o in &list {
            remove(chunks, large, (vm, o.seq))?;
        }
        n += list.iter().filter(|o| o.kind != THIN).count();
        if let Some(thin) = thin {
            let end = list.iter().map(|o| o.end).max().unwrap_or(0);
            put(chunks, large, (vm, list[0].seq), (0, end, THIN), &thin)?;
        }
    }
    Ok(n)
}
