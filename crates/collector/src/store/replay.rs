//! A VM's stored record chunks back into a profile, the same for every store: one pass over the
//! chunks in their order, where every chunk defines what later ones refer to but only those
//! whose time falls in the asked range count their values. A chunk whose head has seq 0 starts
//! a new stream (an agent older than the record stream sends each batch as one, and so does a
//! pushed profile); the streams' profiles are merged at the end.

use super::backend::VmSamples;
use super::merge::merge_profiles;
use jvmprof_profile::records::{self, ChunkHead, Framed, Replay};
use jvmprof_profile::{Metric, Profile};

/// Whether the first chunk in `bytes` starts a stream (its head has seq 0).
pub(crate) fn starts_stream(bytes: &[u8]) -> bool {
    head(bytes).is_some_and(|h| h.seq == 0)
}

/// The head of the first chunk in `bytes`.
pub(crate) fn head(bytes: &[u8]) -> Option<ChunkHead> {
    let Framed::Chunk(payload, _) = records::next_chunk(bytes) else {
        return None;
    };
    let body = records::body(payload).ok()?;
    postcard::take_from_bytes::<ChunkHead>(&body)
        .ok()
        .map(|x| x.0)
}

/// Replays one VM's chunks, in order, for the range `[from, to]` (Unix ms).
pub(crate) struct VmReplay {
    from: u64,
    to: u64,
    replay: Replay,
    applied: bool,
    /// Profiles of the streams that ended before the current one.
    done: Vec<Profile>,
    first: u64,
    last: u64,
    /// The metadata of the last stream (for an empty answer's metrics).
    meta: jvmprof_profile::Meta,
}

impl VmReplay {
    pub(crate) fn new(from: u64, to: u64) -> VmReplay {
        VmReplay {
            from,
            to,
            replay: Replay::without_timeline(),
            applied: false,
            done: Vec::new(),
            first: u64::MAX,
            last: 0,
            meta: Default::default(),
        }
    }

    /// Applies the framed chunks `bytes`, stored for the times `[start, end]` (a rollup spans its
    /// minute); returns what they added in the range: (samples, CPU or wall ns: the `ns`
    /// metric, else samples × interval).
    pub(crate) fn add(&mut self, start: u64, end: u64, bytes: &[u8]) -> anyhow::Result<(u64, u64)> {
        if self.applied && starts_stream(bytes) {
            self.end_stream()?;
        }
        let inside = start <= self.to && end >= self.from;
        self.replay.counting(inside);
        self.applied = true;
        if inside {
            self.first = self.first.min(start);
            self.last = self.last.max(end);
        }
        let (mut samples, mut ns) = (0u64, 0u64);
        let mut rest = bytes;
        loop {
            match records::next_chunk(rest) {
                Framed::Chunk(payload, n) => {
                    self.replay
                        .apply_payload(payload)
                        .map_err(|e| anyhow::anyhow!("a stored chunk: {e}"))?;
                    rest = &rest[n..];
                    if inside {
                        let meta = &self.replay.profile().meta;
                        let at = |m: Metric| meta.metrics.iter().position(|x| *x == m);
                        let (si, ni) = (at(Metric::Samples), at(Metric::Ns));
                        let (mut s, mut t) = (0u64, 0u64);
                        for (_, v) in self.replay.gained() {
                            s = s.saturating_add(si.and_then(|i| v.get(i).copied()).unwrap_or(0));
                            t = t.saturating_add(ni.and_then(|i| v.get(i).copied()).unwrap_or(0));
                        }
                        if ni.is_none() {
                            t = s.saturating_mul(meta.interval_ns);
                        }
                        samples = samples.saturating_add(s);
                        ns = ns.saturating_add(t);
                    }
                }
                Framed::Damaged(n) => {
                    self.replay.skip_damaged();
                    rest = &rest[n..];
                }
                Framed::Partial if rest.is_empty() => break,
                Framed::Partial | Framed::Garbage(_) => {
                    anyhow::bail!("a stored chunk is cut short or unframed")
                }
            }
        }
        Ok((samples, ns))
    }

    fn end_stream(&mut self) -> anyhow::Result<()> {
        let replay = std::mem::replace(&mut self.replay, Replay::without_timeline());
        let (mut p, _) = replay
            .finish()
            .map_err(|e| anyhow::anyhow!("stored chunks: {e}"))?;
        self.meta = p.meta.clone();
        p.samples.retain(|s| s.values.iter().any(|v| *v != 0));
        if !p.samples.is_empty() {
            self.done.push(p);
        }
        Ok(())
    }

    /// The samples in the range, merged; `None` if no chunk was in it.
    pub(crate) fn finish(mut self) -> anyhow::Result<Option<VmSamples>> {
        if self.applied {
            self.end_stream()?;
        }
        if self.first == u64::MAX {
            return Ok(None);
        }
        let profile = match merge_profiles(self.done) {
            Some(b) => b.finish(),
            None => super::merge::builder_like(&self.meta).finish(),
        };
        Ok(Some(VmSamples {
            profile,
            first: self.first,
            last: self.last,
        }))
    }
}
