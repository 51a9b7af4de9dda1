//! Method traces streamed by agents in trace mode (issue 16, JaViz): each VM's chunks are
//! appended as they arrive to `DATA/traces/VM.jvmtrace` (the marker and the chunks of crates/
//! profile `trace::log`, as in a native file's trace section), at most [`MAX_PER_VM`] bytes per VM
//! (later chunks are counted and dropped). `GET /api/trace` joins the VMs' traces with
//! `jvmprof_profile::trace` into one tree across their remote calls, as JSON, text, Chrome
//! trace or the HTML viewer, reading the files afresh each time, so the tree grows as calls
//! complete. The files survive a restart; a deleted VM's file goes with it.

use jvmprof_profile::trace::log::{self as tracelog, SECTION};
use jvmprof_profile::trace::{self as tracetree, OutputFormat, Recording};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Most bytes of traces kept per VM.
pub const MAX_PER_VM: u64 = 256 << 20;

#[derive(Default)]
struct VmFile {
    /// The last chunk number appended (re-sent chunks are ignored).
    last_seq: u64,
    bytes: u64,
    dropped_chunks: u64,
}

pub struct Traces {
    dir: PathBuf,
    vms: Mutex<HashMap<u64, VmFile>>,
}

impl Traces {
    /// The traces under `data/traces`, with those an earlier run left.
    pub fn open(data: &Path) -> std::io::Result<Traces> {
        let dir = data.join("traces");
        crate::store::create_private_dir(&dir)?;
        let mut vms = HashMap::new();
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "jvmtrace")
                && let Some(id) = p.file_stem().and_then(|s| s.to_str()?.parse().ok())
            {
                let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
                // Numbering restarts with the agent; after a restart of the collector, chunks
                // of a VM still streaming are appended whatever their number.
                vms.insert(
                    id,
                    VmFile {
                        last_seq: 0,
                        bytes,
                        dropped_chunks: 0,
                    },
                );
            }
        }
        Ok(Traces {
            dir,
            vms: Mutex::new(vms),
        })
    }

    fn path(&self, vm: u64) -> PathBuf {
        self.dir.join(format!("{vm}.jvmtrace"))
    }

    /// Appends chunk `seq` of `vm` (checked by the decoder); false if it was dropped.
    pub fn append(&self, vm: u64, seq: u64, chunk: &[u8]) -> std::io::Result<bool> {
        let mut vms = self.vms.lock().unwrap_or_else(|e| e.into_inner());
        let f = vms.entry(vm).or_default();
        if seq != 0 && seq <= f.last_seq {
            return Ok(false);
        }
        if f.bytes + chunk.len() as u64 > MAX_PER_VM {
            f.dropped_chunks += 1;
            return Ok(false);
        }
        let path = self.path(vm);
        let fresh = f.bytes == 0;
        let mut file = crate::private::open_private(&path, true)?;
        if fresh {
            file.write_all(SECTION)?;
            f.bytes += SECTION.len() as u64;
        }
        file.write_all(chunk)?;
        f.bytes += chunk.len() as u64;
        f.last_seq = seq;
        Ok(true)
    }

    /// The VMs with traces.
    pub fn vms(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .vms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// Chunks dropped for `vm` because its traces reached [`MAX_PER_VM`].
    pub fn dropped(&self, vm: u64) -> u64 {
        self.vms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&vm)
            .map_or(0, |f| f.dropped_chunks)
    }

    /// One VM's traces so far (a chunk being written is left out, as damage).
    pub fn recording(&self, vm: u64, name: &str) -> Option<Recording> {
        let bytes = std::fs::read(self.path(vm)).ok()?;
        let chunks = bytes.strip_prefix(SECTION.as_slice())?;
        let origin = format!("VM {vm} ({name})");
        let (trace, damage) = tracelog::read_chunks(chunks, &origin);
        Some(Recording {
            origin,
            trace,
            damage,
        })
    }

    /// The joined tree of `vms` (id, name) in `format`.
    pub fn joined(&self, vms: &[(u64, String)], format: OutputFormat) -> std::io::Result<Vec<u8>> {
        let recordings: Vec<Recording> = vms
            .iter()
            .filter_map(|(id, name)| self.recording(*id, name))
            .collect();
        let joined = tracetree::join(recordings);
        let mut out = Vec::new();
        joined.write(format, &mut out)?;
        Ok(out)
    }

    /// Removes a deleted VM's traces.
    pub fn remove(&self, vm: u64) {
        self.vms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&vm);
        let _ = std::fs::remove_file(self.path(vm));
    }
}
