//! Heap dumps uploaded for a VM (`POST /api/vms/{id}/heap`, sent by `jvmprof dump PID --hprof
//! FILE --server HOST:PORT`): streamed to `DATA/heaps/VM.hprof` (never held in memory), analysed
//! in the background by `jvmprof_heap`, and kept as `VM.json` and `VM.html` beside it, which
//! `GET /api/vms/{id}/heap` serves and the UI links to. One dump per VM: a new upload replaces
//! the old one. The reports survive a restart of the collector.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where a VM's heap report stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeapState {
    Analysing,
    Ready,
    Failed(String),
}

impl HeapState {
    pub fn label(&self) -> String {
        match self {
            HeapState::Analysing => "analysing".into(),
            HeapState::Ready => "ready".into(),
            HeapState::Failed(e) => format!("failed: {e}"),
        }
    }
}

pub struct Heaps {
    dir: PathBuf,
    states: Mutex<HashMap<u64, HeapState>>,
}

impl Heaps {
    /// The heap reports under `data/heaps`, with those left by an earlier run.
    pub fn open(data: &Path) -> std::io::Result<Heaps> {
        let dir = data.join("heaps");
        crate::store::create_private_dir(&dir)?;
        let mut states = HashMap::new();
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "html")
                && let Some(id) = p.file_stem().and_then(|s| s.to_str()?.parse().ok())
            {
                states.insert(id, HeapState::Ready);
            }
        }
        Ok(Heaps {
            dir,
            states: Mutex::new(states),
        })
    }

    pub fn state(&self, vm: u64) -> Option<HeapState> {
        self.states.lock().unwrap().get(&vm).cloned()
    }

    /// Where an upload for `vm` is written while it arrives.
    pub fn incoming(&self, vm: u64) -> PathBuf {
        self.dir.join(format!("{vm}.hprof.part"))
    }

    pub fn report(&self, vm: u64, format: &str) -> PathBuf {
        self.dir.join(format!("{vm}.{format}"))
    }

    /// Marks `vm` as being analysed; false when an analysis of it already runs.
    pub fn begin(&self, vm: u64) -> bool {
        let mut states = self.states.lock().unwrap();
        if states.get(&vm) == Some(&HeapState::Analysing) {
            return false;
        }
        states.insert(vm, HeapState::Analysing);
        true
    }

    pub fn fail(&self, vm: u64, e: String) {
        self.states.lock().unwrap().insert(vm, HeapState::Failed(e));
    }

    /// Analyses the complete upload (blocking: run it off the async threads) and stores the
    /// reports.
    pub fn analyse(&self, vm: u64) {
        let part = self.incoming(vm);
        let dump = self.dir.join(format!("{vm}.hprof"));
        let result = std::fs::rename(&part, &dump)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                jvmprof_heap::analyze_file(
                    &dump,
                    &jvmprof_heap::Options::default(),
                    &mut |_, _, _| {},
                )
                .map_err(|e| e.to_string())
            })
            .and_then(|report| {
                let write = crate::private::write_private;
                write(
                    &self.report(vm, "json"),
                    jvmprof_heap::render::json(&report),
                )
                .and_then(|()| {
                    write(
                        &self.report(vm, "html"),
                        jvmprof_heap::render::html(&report),
                    )
                })
                .map_err(|e| e.to_string())
            });
        let state = match result {
            Ok(()) => HeapState::Ready,
            Err(e) => {
                eprintln!("jvmprof serve: the heap dump of VM {vm} was not analysed: {e}");
                let _ = std::fs::remove_file(self.report(vm, "html"));
                HeapState::Failed(e)
            }
        };
        self.states.lock().unwrap().insert(vm, state);
    }

    /// Deletes the VM's dump and reports (the VM was deleted).
    pub fn remove(&self, vm: u64) {
        self.states.lock().unwrap().remove(&vm);
        for name in [
            format!("{vm}.hprof"),
            format!("{vm}.hprof.part"),
            format!("{vm}.json"),
            format!("{vm}.html"),
        ] {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
    }
}
