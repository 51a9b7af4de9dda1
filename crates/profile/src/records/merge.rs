//! Rewriting chunks without replaying them into a profile: [`merge`] joins consecutive chunks
//! of one stream into one (the collector's per-minute rollups), [`thin`] keeps only what later
//! chunks refer to (an agent dropping samples it cannot deliver, a store expiring old data).
//! Both keep every id: the result defines the same frames, stacks, threads and samples in the
//! same order, so the chunks after it keep their meaning.

use super::write::seal;
use super::{ChunkHead, Framed, Record, body, decode, next_chunk};
use std::collections::BTreeMap;

/// The chunks in `bytes` (one or more framed chunks back to back), decoded. A damaged, cut or
/// undecodable chunk is an error.
pub fn decode_framed(mut bytes: &[u8]) -> Result<Vec<(ChunkHead, Vec<Record>)>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        match next_chunk(bytes) {
            Framed::Chunk(payload, n) => {
                out.push(body(payload).and_then(|b| decode(&b))?);
                bytes = &bytes[n..];
            }
            Framed::Damaged(_) => return Err("a chunk fails its checksum".into()),
            Framed::Partial => {
                return Err(format!("{} bytes that are not a whole chunk", bytes.len()));
            }
            Framed::Garbage(len) => return Err(format!("a chunk claims {len} bytes")),
        }
    }
    Ok(out)
}

/// What comes after a chunk of `head` holding `records`: the head the next chunk of the same
/// stream has.
pub fn after(head: &ChunkHead, records: &[Record]) -> ChunkHead {
    let mut next = ChunkHead {
        seq: head.seq + 1,
        ..*head
    };
    for r in records {
        match r {
            Record::Frame(_) => next.frames += 1,
            Record::Stack { .. } => next.stacks += 1,
            Record::Thread(_) => next.threads += 1,
            Record::Sample { .. } => next.samples += 1,
            _ => {}
        }
    }
    next
}

/// How many sample records (new samples and additions) the chunks hold, and the sum of their
/// first values (the sample count in CPU and wall modes).
pub fn weight(chunks: &[(ChunkHead, Vec<Record>)]) -> (u64, u64) {
    let mut records = 0u64;
    let mut first = 0u64;
    for (_, rs) in chunks {
        for r in rs {
            if let Record::Sample { values, .. } | Record::Add { values, .. } = r {
                records += 1;
                first = first.saturating_add(values.first().copied().unwrap_or(0));
            }
        }
    }
    (records, first)
}

/// One chunk holding what `parts` (framed chunks, in stream order) hold: the same definitions
/// in the same order, each sample's values summed, timeline entries left out. Its head is the
/// first chunk's. An error when a chunk does not continue the one before it (a gap, or the
/// start of another stream), or when the chunks do not decode.
pub fn merge(parts: &[&[u8]]) -> Result<Vec<u8>, String> {
    rewrite(parts, true)
}

/// The chunks in `parts` with their sample values dropped: definitions only (new samples keep
/// their place with zero values), so that later chunks still resolve.
pub fn thin(parts: &[&[u8]]) -> Result<Vec<u8>, String> {
    rewrite(parts, false)
}

fn rewrite(parts: &[&[u8]], values: bool) -> Result<Vec<u8>, String> {
    let mut first: Option<ChunkHead> = None;
    let mut next = ChunkHead::default();
    let mut out: Vec<Record> = Vec::new();
    // Sample id → its record in `out`, for samples made inside the run.
    let mut made: BTreeMap<u32, usize> = BTreeMap::new();
    // Additions to samples made before the run.
    let mut adds: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut ended = false;
    // The id the next sample record makes.
    let mut sample_id = 0u32;
    for part in parts {
        for (head, records) in decode_framed(part)? {
            match first {
                None => {
                    first = Some(head);
                    sample_id = head.samples;
                }
                Some(_) => {
                    let same = (head.frames, head.stacks, head.threads, head.samples)
                        == (next.frames, next.stacks, next.threads, next.samples);
                    if !same || ended {
                        return Err(format!(
                            "chunk {} does not continue chunk {}",
                            head.seq,
                            next.seq.saturating_sub(1)
                        ));
                    }
                }
            }
            next = after(&head, &records);
            for r in records {
                match r {
                    Record::Sample {
                        thread,
                        stack,
                        state,
                        values: v,
                    } => {
                        made.insert(sample_id, out.len());
                        sample_id += 1;
                        let v = if values { v } else { vec![0; v.len()] };
                        out.push(Record::Sample {
                            thread,
                            stack,
                            state,
                            values: v,
                        });
                    }
                    Record::Add { sample, values: v } if values => {
                        let into = match made.get(&sample).map(|&i| &mut out[i]) {
                            Some(Record::Sample { values, .. }) => values,
                            _ => adds.entry(sample).or_insert_with(|| vec![0; v.len()]),
                        };
                        for (a, x) in into.iter_mut().zip(&v) {
                            *a = a.saturating_add(*x);
                        }
                    }
                    // Snapshots are for the live view: a rollup or a thinned chunk keeps none.
                    Record::Add { .. } | Record::Time { .. } | Record::Threads(_) => {}
                    Record::Trace(_) if !values => {}
                    Record::End => ended = true,
                    other => out.push(other),
                }
            }
        }
    }
    let Some(head) = first else {
        return Err("nothing to rewrite".into());
    };
    out.extend(
        adds.into_iter()
            .map(|(sample, values)| Record::Add { sample, values }),
    );
    if ended {
        out.push(Record::End);
    }
    let mut body = Vec::new();
    for r in &out {
        postcard::to_io(r, &mut body).map_err(|e| e.to_string())?;
    }
    let mut framed = Vec::new();
    seal(&head, &mut body, &mut framed).map_err(|e| e.to_string())?;
    Ok(framed)
}
