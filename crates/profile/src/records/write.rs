//! The record writer: what a growing [`Profile`] gained since the last call, as framed chunks.
//!
//! The agent calls [`RecordWriter::update`] about once a second with its sink's profile and
//! what each sample gained (the sink keeps that as it adds, so nothing re-scans the profile);
//! [`RecordWriter::whole`] writes a finished profile at once (`convert -o x.jvmprof`). Frames,
//! stacks, threads, samples and timeline entries only grow in a profile being built, so the
//! writer remembers how many of each it has written and writes the rest.

use super::{CHUNK_TARGET, ChunkHead, DEFLATE, MAX_CHUNK, RAW, RecordRef, ThreadsAt, frame_chunk};
use crate::model::{Meta, Profile, Stacks};
use crate::trace::log as tracelog;
use flate2::Compression;
use std::io::{self, Write};

/// Turns a profile's growth into chunks. One per stream (a file, a connection).
#[derive(Debug, Default)]
pub struct RecordWriter {
    /// How many of each were written (in finished chunks and in the one being built).
    written: ChunkHead,
    /// Timeline entries written.
    timeline: usize,
    /// The metadata last written.
    meta: Option<Meta>,
    /// The chunk being built: its head and its records' bytes.
    head: ChunkHead,
    body: Vec<u8>,
    /// Finished chunks, framed, not yet taken.
    out: Vec<u8>,
    /// Whether `End` was written.
    ended: bool,
}

impl RecordWriter {
    pub fn new() -> RecordWriter {
        RecordWriter::default()
    }

    /// Records what `profile` gained since the last call: its metadata if it changed, new frames,
    /// stacks and threads, `gained` (sample index → values gained, ascending; a sample not
    /// written before must be in it), new timeline entries, trace mode's `traces`, and with
    /// `end` the end of the stream. Returns the framed chunks (empty when nothing changed).
    pub fn update(
        &mut self,
        profile: &Profile,
        gained: &[(u32, Vec<u64>)],
        traces: &[tracelog::Chunk],
        end: bool,
    ) -> io::Result<Vec<u8>> {
        if self.ended {
            return Ok(Vec::new());
        }
        self.definitions(profile)?;
        for (index, values) in gained {
            let Some(s) = profile.samples.get(*index as usize) else {
                return Err(io::Error::other(format!("no sample {index} to record")));
            };
            if *index > self.written.samples {
                return Err(io::Error::other(format!(
                    "sample {index} gained before sample {} was recorded",
                    self.written.samples
                )));
            }
            if *index == self.written.samples {
                self.push(&RecordRef::Sample {
                    thread: s.thread,
                    stack: s.stack,
                    state: s.state,
                    values,
                })?;
                self.written.samples += 1;
            } else {
                self.push(&RecordRef::Add {
                    sample: *index,
                    values,
                })?;
            }
        }
        for t in &profile.timeline[self.timeline.min(profile.timeline.len())..] {
            if t.sample >= self.written.samples {
                break; // its sample has not been recorded (the caller's gain comes later)
            }
            self.push(&RecordRef::Time {
                sample: t.sample,
                offset_ns: t.offset_ns,
                weight: t.weight,
                trace: t.trace,
            })?;
            self.timeline += 1;
        }
        for chunk in traces {
            self.push(&RecordRef::Trace(chunk))?;
        }
        if end {
            self.push(&RecordRef::End)?;
            self.ended = true;
        }
        self.cut()?;
        Ok(std::mem::take(&mut self.out))
    }

    /// Records the stacks of all threads at one moment (`threads`, whose stacks are `profile`'s),
    /// after what `profile` defined since the last call (not its samples: they go with
    /// [`RecordWriter::update`]). Returns the framed chunk.
    pub fn threads(&mut self, profile: &Profile, threads: &ThreadsAt) -> io::Result<Vec<u8>> {
        if self.ended {
            return Ok(Vec::new());
        }
        self.definitions(profile)?;
        if let Some(bad) = threads
            .threads
            .iter()
            .find(|t| t.stack >= self.written.stacks)
        {
            return Err(io::Error::other(format!(
                "thread {} is on stack {} of {}",
                bad.id, bad.stack, self.written.stacks
            )));
        }
        self.push(&RecordRef::Threads(threads))?;
        self.cut()?;
        Ok(std::mem::take(&mut self.out))
    }

    /// Records the metadata if it changed and the frames, stacks and threads `profile` has
    /// that were not recorded yet.
    fn definitions(&mut self, profile: &Profile) -> io::Result<()> {
        let w = &self.written;
        if profile.frames.len() < w.frames as usize
            || profile.stacks.len() < w.stacks as usize
            || profile.threads.len() < w.threads as usize
            || profile.samples.len() < w.samples as usize
        {
            return Err(io::Error::other(
                "the profile has fewer frames, stacks, threads or samples than were recorded",
            ));
        }
        if self.meta.as_ref() != Some(&profile.meta) {
            self.push(&RecordRef::Meta(&profile.meta))?;
            self.meta = Some(profile.meta.clone());
        }
        for f in &profile.frames[self.written.frames as usize..] {
            self.push(&RecordRef::Frame(f))?;
            self.written.frames += 1;
        }
        let stacks = &profile.stacks;
        for s in self.written.stacks..stacks.len() as u32 {
            let parent = stacks.parent(s).unwrap_or(Stacks::NONE);
            let frame = stacks.top(s).unwrap_or(Stacks::NONE);
            self.push(&RecordRef::Stack { parent, frame })?;
            self.written.stacks += 1;
        }
        for t in &profile.threads[self.written.threads as usize..] {
            self.push(&RecordRef::Thread(t))?;
            self.written.threads += 1;
        }
        Ok(())
    }

    /// A whole profile and trace mode's `traces` as chunks (every sample with all its values),
    /// ended.
    pub fn whole(profile: &Profile, traces: &[tracelog::Chunk]) -> io::Result<Vec<u8>> {
        RecordWriter::new().update(profile, &everything(profile), traces, true)
    }

    /// How many samples have been recorded so far.
    pub fn samples(&self) -> u32 {
        self.written.samples
    }

    /// Appends one record to the chunk being built, cutting it first when it is full.
    fn push(&mut self, r: &RecordRef<'_>) -> io::Result<()> {
        if self.body.len() >= CHUNK_TARGET {
            self.cut()?;
        }
        postcard::to_io(r, &mut self.body).map_err(io::Error::other)?;
        Ok(())
    }

    /// Finishes the chunk being built (if it has records) and starts the next one.
    fn cut(&mut self) -> io::Result<()> {
        if self.body.is_empty() {
            self.head = ChunkHead {
                seq: self.head.seq,
                ..self.written
            };
            return Ok(());
        }
        seal(&self.head, &mut self.body, &mut self.out)?;
        self.head = ChunkHead {
            seq: self.head.seq + 1,
            ..self.written
        };
        Ok(())
    }
}

/// Frames a chunk of `head` and the encoded records in `body` (emptied) onto `out`: deflated
/// when that is worth it.
pub(crate) fn seal(head: &ChunkHead, body: &mut Vec<u8>, out: &mut Vec<u8>) -> io::Result<()> {
    let mut plain = postcard::to_allocvec(head).map_err(io::Error::other)?;
    plain.append(body);
    let payload = if plain.len() > 256 {
        let mut payload = vec![DEFLATE];
        let mut z = flate2::write::DeflateEncoder::new(&mut payload, Compression::new(2));
        z.write_all(&plain)?;
        z.finish()?;
        payload
    } else {
        let mut payload = Vec::with_capacity(plain.len() + 1);
        payload.push(RAW);
        payload.extend_from_slice(&plain);
        payload
    };
    if payload.len() > MAX_CHUNK as usize {
        return Err(io::Error::other("a record chunk over 64 MiB"));
    }
    frame_chunk(&payload, out);
    Ok(())
}

/// Every sample's values, as if all were gained now: what a writer that starts on a finished
/// profile records.
pub fn everything(profile: &Profile) -> Vec<(u32, Vec<u64>)> {
    profile
        .samples
        .iter()
        .enumerate()
        .map(|(i, s)| (i as u32, s.values.clone()))
        .collect()
}
