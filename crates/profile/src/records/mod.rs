//! Records: the one append-only stream of what a profiling session produces (DESIGN.md,
//! "Records: the one stream"). The native file (format 5) is a header and these chunks; the
//! agent appends a chunk about once a second, so a JVM killed at any moment leaves a file that
//! reads up to its last whole chunk.
//!
//! A chunk is framed as trace mode's [`crate::tracelog`] chunks are: a `u32` length, a `u32`
//! CRC-32 of the payload (both little-endian), the payload. The payload is one codec byte
//! ([`RAW`] or [`DEFLATE`]) and the body: a postcard [`ChunkHead`], then postcard [`Record`]s
//! to its end. Frames, stacks, threads and samples are numbered by the order of their records
//! in the whole stream (ids are implicit: the n-th `Frame` record is frame n); each chunk's head
//! says how many of each came before it, so a damaged chunk can be skipped and counted while
//! the chunks after it keep their meaning ([`replay`] puts `[lost]` placeholders where the
//! skipped chunk's frames, stacks and threads were, and their samples still count).
//!
//! Symbolised once (the agent's sink names each frame once) and interned once per session (the
//! sink's builder): a record carries ids, never a second copy of a frame. [`write`] turns a
//! growing [`Profile`] and what its samples gained into chunks; [`replay`] turns chunks back
//! into the same profile.
//!
//! Postcard is not self-describing: a new record kind goes at the end of [`Record`] (older
//! readers then reject the chunks that hold one), and any change to a model type a record
//! carries needs a new native format version.

pub mod merge;
pub mod replay;
pub mod write;

use crate::model::{Frame, Meta, Thread, ThreadState};
use crate::trace::log as tracelog;
use serde::{Deserialize, Serialize};

pub use replay::{Replay, Tail};
pub use write::RecordWriter;

/// Payload codec: the body as is.
pub const RAW: u8 = 0;
/// Payload codec: the body deflated (raw deflate, no zlib or gzip header).
pub const DEFLATE: u8 = 1;
/// The largest chunk accepted, framed or inflated (a damaged length or a deflate bomb must not
/// allocate gigabytes).
pub const MAX_CHUNK: u32 = 64 << 20;
/// A chunk is cut once its body grows past this many bytes (before compression).
pub const CHUNK_TARGET: usize = 1 << 20;

/// What came before a chunk: how many frames, stacks, threads and samples earlier chunks
/// made, and the chunk's number (from 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkHead {
    pub seq: u64,
    pub frames: u32,
    pub stacks: u32,
    pub threads: u32,
    pub samples: u32,
}

/// One record. Ids (frame, stack, thread, sample) count the records of that kind before it in
/// the stream, from 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// The session's metadata as it is now; a later one replaces it. Comes before the first
    /// sample (it names the metrics a sample's values are).
    Meta(Meta),
    /// The next frame.
    Frame(Frame),
    /// The next stack: `parent` plus `frame` on top ([`crate::Stacks::NONE`] for no parent; both
    /// `NONE` for the empty stack).
    Stack { parent: u32, frame: u32 },
    /// The next thread.
    Thread(Thread),
    /// The next sample: (thread, stack, state) with `values`, one per metric.
    Sample {
        thread: u32,
        stack: u32,
        state: ThreadState,
        values: Vec<u64>,
    },
    /// `values` added to sample `sample`.
    Add { sample: u32, values: Vec<u64> },
    /// A timeline entry: sample `sample` was taken `offset_ns` after the session began, stands
    /// for `weight` sampling periods, inside traced call tree `trace` (0: none).
    Time {
        sample: u32,
        offset_ns: u64,
        weight: u32,
        trace: u64,
    },
    /// Trace mode's method traces drained since the previous one.
    Trace(tracelog::Chunk),
    /// The session ended; nothing follows.
    End,
    /// The stacks of all threads at one moment (xdProf's snapshot, for the collector's live
    /// view): each thread's stack is a stack of the stream.
    Threads(ThreadsAt),
}

/// All threads at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadsAt {
    pub time_unix_ms: u64,
    pub threads: Vec<ThreadStack>,
}

/// One thread of a [`ThreadsAt`]: `Thread.getId()`, name, group, daemon, state, the order in
/// which the agent first saw it, and its stack (an id of the stream, root first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStack {
    pub id: i64,
    pub name: String,
    pub group: String,
    pub daemon: bool,
    pub state: ThreadState,
    pub order: u64,
    pub stack: u32,
}

/// [`Record`] by reference, for writing without copying (the same encoding, variant for
/// variant: postcard writes a reference as the value and a slice as a `Vec`).
#[derive(Serialize)]
pub(crate) enum RecordRef<'a> {
    Meta(&'a Meta),
    Frame(&'a Frame),
    Stack {
        parent: u32,
        frame: u32,
    },
    Thread(&'a Thread),
    Sample {
        thread: u32,
        stack: u32,
        state: ThreadState,
        values: &'a [u64],
    },
    Add {
        sample: u32,
        values: &'a [u64],
    },
    Time {
        sample: u32,
        offset_ns: u64,
        weight: u32,
        trace: u64,
    },
    Trace(&'a tracelog::Chunk),
    End,
    Threads(&'a ThreadsAt),
}

/// Frames `payload` as a chunk: length, CRC-32, payload.
pub fn frame_chunk(payload: &[u8], out: &mut Vec<u8>) {
    let mut crc = crc32fast::Hasher::new();
    crc.update(payload);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(payload);
}

/// What [`next_chunk`] found at the start of some bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Framed<'a> {
    /// A whole chunk whose checksum matches: its payload, and the bytes it took.
    Chunk(&'a [u8], usize),
    /// A whole chunk whose checksum does not match: the bytes it took (skip them).
    Damaged(usize),
    /// Not a whole chunk yet (a file still being written, or cut short): the bytes needed to
    /// know more, at least.
    Partial,
    /// A length no chunk can have: nothing after this point can be framed.
    Garbage(u32),
}

/// The chunk at the start of `bytes`.
pub fn next_chunk(bytes: &[u8]) -> Framed<'_> {
    if bytes.len() < 8 {
        return Framed::Partial;
    }
    let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if len > MAX_CHUNK {
        return Framed::Garbage(len);
    }
    let Some(payload) = bytes.get(8..8 + len as usize) else {
        return Framed::Partial;
    };
    let mut h = crc32fast::Hasher::new();
    h.update(payload);
    if h.finalize() == crc {
        Framed::Chunk(payload, 8 + len as usize)
    } else {
        Framed::Damaged(8 + len as usize)
    }
}

/// The body of a chunk's payload: inflated when deflated, never beyond [`MAX_CHUNK`].
pub fn body(payload: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    use std::io::Read;
    match payload.split_first() {
        Some((&RAW, body)) => Ok(body.into()),
        Some((&DEFLATE, body)) => {
            let mut out = Vec::with_capacity(body.len() * 4);
            let mut inflate =
                flate2::read::DeflateDecoder::new(body).take(u64::from(MAX_CHUNK) + 1);
            inflate
                .read_to_end(&mut out)
                .map_err(|e| format!("a chunk does not inflate: {e}"))?;
            if out.len() > MAX_CHUNK as usize {
                return Err(format!("a chunk inflates past {MAX_CHUNK} bytes"));
            }
            Ok(out.into())
        }
        Some((codec, _)) => Err(format!("a chunk has the unknown codec {codec}")),
        None => Err("a chunk is empty".into()),
    }
}

/// The head and the records of a chunk's body.
pub fn decode(body: &[u8]) -> Result<(ChunkHead, Vec<Record>), String> {
    let (head, mut rest): (ChunkHead, &[u8]) = postcard::take_from_bytes(body)
        .map_err(|e| format!("a chunk head does not decode: {e}"))?;
    let mut records = Vec::new();
    while !rest.is_empty() {
        let (r, more): (Record, &[u8]) = postcard::take_from_bytes(rest).map_err(|e| {
            format!(
                "record {} of chunk {} does not decode: {e}",
                records.len(),
                head.seq
            )
        })?;
        records.push(r);
        rest = more;
    }
    Ok((head, records))
}

#[cfg(test)]
mod tests;
