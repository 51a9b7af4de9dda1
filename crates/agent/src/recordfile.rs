//! The session's native file (`file=X.jvmprof`) as the record stream: the header when the
//! session starts, then a chunk of records about once a second (what the sink's profile gained),
//! and the last chunk with the `End` record when the session ends. A JVM killed at any moment
//! leaves a file that reads up to its last whole chunk; `jvmprof top` and the CLI follow it
//! while it grows, and its `End` tells them the session is over. Nothing rewrites the file.

use jvmprof_profile::records::RecordWriter;
use jvmprof_profile::trace::log as tracelog;
use jvmprof_profile::{Profile, native};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct RecordFile {
    path: PathBuf,
    out: File,
    writer: RecordWriter,
}

impl RecordFile {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path) -> Result<RecordFile, String> {
        let mut out =
            File::create(path).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        out.write_all(&native::records_header())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(RecordFile {
            path: path.to_path_buf(),
            out,
            writer: RecordWriter::new(),
        })
    }

    /// Appends what `profile` gained since the last call (see [`RecordWriter::update`]).
    pub fn append(
        &mut self,
        profile: &Profile,
        gained: &[(u32, Vec<u64>)],
        traces: &[tracelog::Chunk],
        end: bool,
    ) -> Result<(), String> {
        let bytes = self
            .writer
            .update(profile, gained, traces, end)
            .and_then(|b| self.out.write_all(&b));
        bytes.map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    /// Appends trace mode's part file (the section marker and framed trace chunks, as the trace
    /// engine drained them) as trace records, a batch at a time, then ends the stream.
    pub fn finish_with_traces(
        &mut self,
        profile: &Profile,
        gained: &[(u32, Vec<u64>)],
        part: Option<&Path>,
    ) -> Result<(), String> {
        self.append(profile, gained, &[], false)?;
        if let Some(part) = part {
            let bytes = std::fs::read(part)
                .map_err(|e| format!("cannot read the traces in {}: {e}", part.display()))?;
            let mut rest = bytes
                .strip_prefix(tracelog::SECTION.as_slice())
                .unwrap_or(&[]);
            let mut batch = Vec::new();
            let mut batch_bytes = 0;
            while let jvmprof_profile::records::Framed::Chunk(payload, n) =
                jvmprof_profile::records::next_chunk(rest)
            {
                if let Ok(c) = tracelog::decode_chunk(payload) {
                    batch.push(c);
                    batch_bytes += n;
                }
                rest = &rest[n..];
                if batch_bytes > 8 << 20 {
                    self.append(profile, &[], &std::mem::take(&mut batch), false)?;
                    batch_bytes = 0;
                }
            }
            self.append(profile, &[], &batch, false)?;
        }
        self.append(profile, &[], &[], true)?;
        self.out
            .flush()
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}
