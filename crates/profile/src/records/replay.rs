//! Replay: records back into a [`Profile`], wherever they come from (a native file, a file
//! still being written, a connection). [`Replay`] applies chunks in order; [`Tail`] follows a
//! file that an agent is appending to and hands back what each read added (`jvmprof top`).
//!
//! Every id a record uses is checked before it is used, so a file cannot make a reader panic;
//! a chunk that fails its checksum or does not decode is skipped and counted, and the ids its
//! records would have made are filled with `[lost]` placeholders so that later chunks keep
//! their meaning.

use super::{ChunkHead, Framed, Record, ThreadsAt, body, decode, next_chunk};
use crate::model::{Frame, FrameKind, Profile, Sample, Stacks, Thread, ThreadState, TimedSample};
use crate::trace::log::{self as tracelog, VmTrace};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Records applied so far, and what they made.
#[derive(Debug, Default)]
pub struct Replay {
    profile: Profile,
    trace: Option<(VmTrace, HashMap<u64, usize>)>,
    /// Chunks applied, and chunks skipped as damaged.
    chunks: u64,
    damaged: u64,
    ended: bool,
    /// Samples that the last chunk added to, with what they gained (for [`Tail`]).
    gained: Vec<(u32, Vec<u64>)>,
    /// The thread snapshots of the last chunk.
    threads: Vec<ThreadsAt>,
    /// Whether sample values count ([`Replay::counting`]): a chunk outside a queried time range
    /// still defines frames, stacks, threads and samples, but adds nothing.
    muted: bool,
    /// Timeline entries are skipped (a store's replay answers totals, not timelines).
    no_timeline: bool,
}

/// One placeholder frame, thread or stack stands for whatever a skipped chunk held.
const LOST: &str = "[lost]";

impl Replay {
    pub fn new() -> Replay {
        Replay::default()
    }

    /// Applies one framed chunk's payload. An `Err` is invalid data (an id out of range): the
    /// stream cannot be trusted past it. A payload that does not decode is counted as damaged.
    pub fn apply_payload(&mut self, payload: &[u8]) -> Result<(), String> {
        let decoded = body(payload).and_then(|b| decode(&b));
        match decoded {
            Ok((head, records)) => self.apply(head, records),
            Err(_) => {
                self.damaged += 1;
                Ok(())
            }
        }
    }

    /// A replay that skips timeline entries (they are the bulk of a long wall-mode stream and a
    /// store's queries only want totals).
    pub fn without_timeline() -> Replay {
        Replay {
            no_timeline: true,
            ..Replay::default()
        }
    }

    /// Whether the chunks applied next count their sample values (by default they do). With
    /// `false` they still define what later chunks refer to (new samples get zero values).
    pub fn counting(&mut self, count: bool) {
        self.muted = !count;
    }

    /// Counts a chunk skipped because its checksum failed.
    pub fn skip_damaged(&mut self) {
        self.damaged += 1;
    }

    /// Applies a chunk's records.
    pub fn apply(&mut self, head: ChunkHead, records: Vec<Record>) -> Result<(), String> {
        self.gained.clear();
        self.threads.clear();
        if self.ended {
            return Err(format!("chunk {} after the end of the stream", head.seq));
        }
        self.fill_gap(&head)?;
        for r in records {
            self.record(r)?;
        }
        self.chunks += 1;
        Ok(())
    }

    /// Where a skipped chunk left a gap before `head`, placeholders: `[lost]` frames and
    /// threads, empty stacks (a later stack on one of them starts at the root), and samples of
    /// the last thread and stack (later `Add` records still count in them).
    fn fill_gap(&mut self, head: &ChunkHead) -> Result<(), String> {
        let p = &mut self.profile;
        let behind = |what: &str, have: usize, want: u32| {
            if have > want as usize {
                Err(format!(
                    "chunk {} starts at {what} {want} but {have} came before it",
                    head.seq
                ))
            } else {
                Ok(want as usize - have)
            }
        };
        let frames = behind("frame", p.frames.len(), head.frames)?;
        let stacks = behind("stack", p.stacks.len(), head.stacks)?;
        let threads = behind("thread", p.threads.len(), head.threads)?;
        let samples = behind("sample", p.samples.len(), head.samples)?;
        p.frames
            .extend((0..frames).map(|_| Frame::synthetic(FrameKind::Synthetic, LOST)));
        for _ in 0..stacks {
            p.stacks.push_empty();
        }
        p.threads.extend((0..threads).map(|_| Thread {
            tid: 0,
            name: LOST.into(),
        }));
        if samples > 0 {
            if p.threads.is_empty() || p.stacks.is_empty() {
                return Err(format!(
                    "chunk {} follows lost samples that no thread or stack can hold",
                    head.seq
                ));
            }
            let thread = (p.threads.len() - 1) as u32;
            let stack = (p.stacks.len() - 1) as u32;
            let n = p.meta.metrics.len();
            p.samples.extend((0..samples).map(|_| Sample {
                thread,
                stack,
                state: ThreadState::Unknown,
                values: vec![0; n],
            }));
        }
        Ok(())
    }

    fn record(&mut self, r: Record) -> Result<(), String> {
        let p = &mut self.profile;
        match r {
            Record::Meta(meta) => {
                if !p.samples.is_empty() && meta.metrics.len() != p.meta.metrics.len() {
                    return Err(format!(
                        "the metadata changes the metrics from {} to {} after samples",
                        p.meta.metrics.len(),
                        meta.metrics.len()
                    ));
                }
                p.meta = meta;
            }
            Record::Frame(f) => p.frames.push(f),
            Record::Stack { parent, frame } => {
                let id = p.stacks.len();
                if parent == Stacks::NONE && frame == Stacks::NONE {
                    p.stacks.push_empty();
                    return Ok(());
                }
                if frame as usize >= p.frames.len() {
                    return Err(format!(
                        "stack {id} refers to frame {frame} but there are {} frames",
                        p.frames.len()
                    ));
                }
                if parent != Stacks::NONE && parent as usize >= id {
                    return Err(format!("stack {id} refers to parent stack {parent}"));
                }
                // An empty parent is a placeholder for a lost stack: this one starts at the
                // root, without the prefix that was lost.
                let parent = (parent != Stacks::NONE)
                    .then_some(parent)
                    .filter(|&s| p.stacks.top(s).is_some());
                p.stacks.push(parent, frame);
            }
            Record::Thread(t) => p.threads.push(t),
            Record::Sample {
                thread,
                stack,
                state,
                values,
            } => {
                let next = p.samples.len();
                if thread as usize >= p.threads.len() {
                    return Err(format!(
                        "sample {next} refers to thread {thread} but there are {} threads",
                        p.threads.len()
                    ));
                }
                if stack as usize >= p.stacks.len() {
                    return Err(format!(
                        "sample {next} refers to stack {stack} but there are {} stacks",
                        p.stacks.len()
                    ));
                }
                let n = p.meta.metrics.len();
                if values.len() != n {
                    return Err(format!(
                        "sample {next} has {} values but the profile has {n} metrics",
                        values.len()
                    ));
                }
                let values = if self.muted { vec![0; n] } else { values };
                p.samples.push(Sample {
                    thread,
                    stack,
                    state,
                    values: values.clone(),
                });
                if !self.muted {
                    self.gained.push((next as u32, values));
                }
            }
            Record::Add { sample, values } => {
                let Some(s) = p.samples.get_mut(sample as usize) else {
                    return Err(format!(
                        "a record adds to sample {sample} but there are {} samples",
                        p.samples.len()
                    ));
                };
                if values.len() != s.values.len() {
                    return Err(format!(
                        "a record adds {} values to sample {sample}, which has {}",
                        values.len(),
                        s.values.len()
                    ));
                }
                if self.muted {
                    return Ok(());
                }
                for (acc, v) in s.values.iter_mut().zip(&values) {
                    *acc = acc.saturating_add(*v);
                }
                self.gained.push((sample, values));
            }
            Record::Time {
                sample,
                offset_ns,
                weight,
                trace,
            } => {
                if self.muted || self.no_timeline {
                    return Ok(());
                }
                if sample as usize >= p.samples.len() {
                    return Err(format!(
                        "timeline entry {} refers to sample {sample} but there are {} samples",
                        p.timeline.len(),
                        p.samples.len()
                    ));
                }
                p.timeline.push(TimedSample {
                    offset_ns,
                    sample,
                    weight,
                    trace,
                });
            }
            Record::Trace(_) if self.muted => {}
            Record::Trace(chunk) => {
                let (t, by_id) = self.trace.get_or_insert_with(Default::default);
                tracelog::merge(t, chunk, by_id);
            }
            Record::End => self.ended = true,
            Record::Threads(t) => {
                if let Some(bad) = t
                    .threads
                    .iter()
                    .find(|t| t.stack as usize >= p.stacks.len())
                {
                    return Err(format!(
                        "thread {} is on stack {} but there are {} stacks",
                        bad.id,
                        bad.stack,
                        p.stacks.len()
                    ));
                }
                self.threads.push(t);
            }
        }
        Ok(())
    }

    /// The profile so far (its timeline in the order recorded).
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The samples the last chunk added to, and what each gained.
    pub fn gained(&self) -> &[(u32, Vec<u64>)] {
        &self.gained
    }

    /// The thread snapshots of the last chunk (their stacks are the profile's).
    pub fn threads(&self) -> &[ThreadsAt] {
        &self.threads
    }

    /// Whether the stream's `End` record came.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Chunks applied and chunks skipped as damaged.
    pub fn chunks(&self) -> (u64, u64) {
        (self.chunks, self.damaged)
    }

    /// The profile (timeline in time order, checked) and trace mode's traces, if any.
    pub fn finish(self) -> Result<(Profile, Option<VmTrace>), String> {
        let mut profile = self.profile;
        profile.timeline.sort_by_key(|t| t.offset_ns);
        profile.validate()?;
        Ok((profile, self.trace.map(|(t, _)| t)))
    }
}

/// What reading a stream of framed chunks found besides the records.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReadNotes {
    /// Bytes at the end that are not a whole chunk (a file still being written, or cut short).
    pub partial_tail: usize,
    /// Where framing became impossible (a length no chunk can have), if it did.
    pub garbage_at: Option<usize>,
}

/// Applies every whole chunk in `bytes` to `replay`; returns how many bytes were consumed and
/// what was left.
pub fn apply_all(replay: &mut Replay, bytes: &[u8]) -> Result<(usize, ReadNotes), String> {
    let mut at = 0;
    loop {
        match next_chunk(&bytes[at..]) {
            Framed::Chunk(payload, n) => {
                replay.apply_payload(payload)?;
                at += n;
            }
            Framed::Damaged(n) => {
                replay.skip_damaged();
                at += n;
            }
            Framed::Partial => {
                return Ok((
                    at,
                    ReadNotes {
                        partial_tail: bytes.len() - at,
                        garbage_at: None,
                    },
                ));
            }
            Framed::Garbage(_) => {
                return Ok((
                    at,
                    ReadNotes {
                        partial_tail: 0,
                        garbage_at: Some(at),
                    },
                ));
            }
        }
    }
}

/// Follows a native file that an agent appends to: each [`Tail::read`] applies the chunks
/// added since the last one and says what they added. Reads only the new bytes.
#[derive(Debug)]
pub struct Tail {
    replay: Replay,
    /// Bytes of the file consumed (header and whole chunks).
    offset: u64,
    /// Whether the header was read and checked.
    header: bool,
    /// Read but not yet a whole chunk.
    pending: Vec<u8>,
}

impl Tail {
    pub fn new() -> Tail {
        Tail {
            replay: Replay::new(),
            offset: 0,
            header: false,
            pending: Vec::new(),
        }
    }

    /// Applies what was appended to the native file `path` (format 5) since the last call;
    /// returns what each sample gained in those chunks (summed per sample).
    pub fn read(&mut self, path: &Path) -> Result<Vec<(u32, Vec<u64>)>, String> {
        let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let len = f.metadata().map_err(|e| e.to_string())?.len();
        let start = self.offset + self.pending.len() as u64;
        if len > start {
            f.seek(SeekFrom::Start(start)).map_err(|e| e.to_string())?;
            let want = (len - start).min(u64::from(super::MAX_CHUNK) * 4);
            f.take(want)
                .read_to_end(&mut self.pending)
                .map_err(|e| e.to_string())?;
        }
        let mut sum: HashMap<u32, Vec<u64>> = HashMap::new();
        let mut at = 0;
        if !self.header {
            let h = crate::native::HEADER_LEN;
            if self.pending.len() < h {
                return Ok(Vec::new());
            }
            crate::native::check_records_header(&self.pending[..h])
                .map_err(|e| format!("{}: {e}", path.display()))?;
            self.header = true;
            at = h;
        }
        loop {
            match next_chunk(&self.pending[at..]) {
                Framed::Chunk(payload, n) => {
                    self.replay.apply_payload(payload)?;
                    for (i, v) in self.replay.gained() {
                        let acc = sum.entry(*i).or_insert_with(|| vec![0; v.len()]);
                        for (a, x) in acc.iter_mut().zip(v) {
                            *a = a.saturating_add(*x);
                        }
                    }
                    at += n;
                }
                Framed::Damaged(n) => {
                    self.replay.skip_damaged();
                    at += n;
                }
                Framed::Partial => break,
                Framed::Garbage(len) => {
                    return Err(format!(
                        "{}: a chunk at byte {} claims {len} bytes",
                        path.display(),
                        self.offset + at as u64
                    ));
                }
            }
        }
        self.pending.drain(..at);
        self.offset += at as u64;
        let mut v: Vec<_> = sum.into_iter().collect();
        v.sort_unstable_by_key(|(i, _)| *i);
        Ok(v)
    }

    /// The profile so far.
    pub fn profile(&self) -> &Profile {
        self.replay.profile()
    }

    /// Whether the session ended.
    pub fn ended(&self) -> bool {
        self.replay.ended()
    }
}

impl Default for Tail {
    fn default() -> Tail {
        Tail::new()
    }
}
