//! What the connection tasks and the HTTP handlers share: one job, to open the collector's
//! state (store, VM registry, analyses, heap dumps, traces, counters) and keep it (deleting VMs,
//! maintaining the store).

use crate::analysis::{Analysis, CallGraphs, LiveView, Snapshots};
use crate::config::Config;
use crate::registry::{DeleteError, Registry};
use crate::stats::Stats;
use crate::store::{Store, now_ms};
use crate::{heaps, traces};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// New VM records one address may create a minute (a host starting many JVMs at once is
/// fine; a client inventing VMs in a loop is refused).
pub const MAX_NEW_VMS_PER_MINUTE: u32 = 300;

/// Everything the connection tasks and the HTTP handlers share.
pub struct Hub {
    pub config: Config,
    pub store: Store,
    pub vms: Arc<Registry>,
    pub live: Arc<LiveView>,
    pub analyses: Vec<Arc<dyn Analysis>>,
    pub stats: Stats,
    /// Heap dumps uploaded per VM and their reports.
    pub heaps: Arc<heaps::Heaps>,
    /// Method traces streamed per VM (trace mode).
    pub traces: Arc<traces::Traces>,
    /// Each VM's record stream as replayed so far (resolves its snapshots).
    pub streams: crate::streams::Streams,
    /// Bytes all agent connections make the collector hold (see `MAX_ALL_CONNECTIONS_BYTES`).
    pub held: std::sync::atomic::AtomicUsize,
    /// Per address: the minute (since the epoch) and how many new VMs it created in it.
    new_vms: Mutex<std::collections::HashMap<std::net::IpAddr, (u64, u32)>>,
}

impl Hub {
    /// Whether `ip` may create another VM record this minute (and counts it if so).
    pub(crate) fn may_add_vm(&self, ip: std::net::IpAddr) -> bool {
        let minute = now_ms() / 60_000;
        let mut map = self.new_vms.lock().unwrap();
        // Old minutes go, so the map holds only this minute's addresses.
        map.retain(|_, (m, _)| *m == minute);
        let (_, n) = map.entry(ip).or_insert((minute, 0));
        if *n >= MAX_NEW_VMS_PER_MINUTE {
            return false;
        }
        *n += 1;
        true
    }

    pub fn open(config: Config) -> anyhow::Result<Hub> {
        // Heap dumps, traces and call graphs live there even with a ClickHouse store.
        crate::private::prepare_data_dir(&config.data)?;
        let store = match &config.clickhouse {
            Some(location) => Store::open_clickhouse(location)?,
            None => Store::open(&config.data)?,
        };
        let vms = Arc::new(Registry::load(
            store.vms()?,
            &store,
            store.next_vm_id()?,
            config.mask.clone(),
        ));
        let live = Arc::new(LiveView::load(&store)?);
        let analyses: Vec<Arc<dyn Analysis>> = vec![
            live.clone(),
            Arc::new(Snapshots::new(store.clone())),
            Arc::new(CallGraphs {
                store: store.clone(),
                dir: config.data.join("callgraphs"),
                vms: vms.clone(),
            }),
        ];
        let heaps = Arc::new(heaps::Heaps::open(&config.data)?);
        let traces = Arc::new(traces::Traces::open(&config.data)?);
        Ok(Hub {
            config,
            store,
            vms,
            live,
            analyses,
            stats: Stats::default(),
            heaps,
            traces,
            streams: Default::default(),
            held: std::sync::atomic::AtomicUsize::new(0),
            new_vms: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Deletes a VM that is not connected, with everything stored of it (samples, frames,
    /// snapshot, heap report, call graph).
    pub async fn delete_vm(&self, id: u64) -> anyhow::Result<Result<(), DeleteError>> {
        let record = match self.vms.remove(id) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        self.store.delete_vm(&record).await?;
        self.forget(id);
        Ok(Ok(()))
    }

    /// Drops what the analyses and the heap reports keep of a deleted VM.
    fn forget(&self, id: u64) {
        for a in &self.analyses {
            a.remove_vm(id);
        }
        self.streams.remove(id);
        self.heaps.remove(id);
        self.traces.remove(id);
    }

    /// Rolls up and expires stored data now and then, for as long as the collector runs.
    pub(crate) async fn maintain(self: Arc<Hub>) {
        let retention = self.config.retention;
        // Often enough that data lives at most a little past its retention.
        let every = retention
            .keep
            .map_or(MAINTENANCE_EVERY, |k| (k / 10).min(MAINTENANCE_EVERY))
            .max(Duration::from_millis(200));
        // A shared store is re-read for VMs other collectors took in.
        let every = if self.store.is_shared() {
            every.min(Duration::from_secs(2))
        } else {
            every
        };
        let mut said = false;
        loop {
            tokio::time::sleep(every).await;
            if self.store.is_shared() {
                let store = self.store.clone();
                if let Ok(Ok(records)) = tokio::task::spawn_blocking(move || store.vms()).await {
                    self.vms.add_stored(records, &self.store);
                }
            }
            loop {
                let connected = self.vms.connected();
                match self.store.maintain(now_ms(), retention, connected).await {
                    Ok(done) => {
                        said = false;
                        for id in &done.removed_vms {
                            // Only VMs that were not connected are removed; one that
                            // connected meanwhile keeps its (new) registry entry.
                            let _ = self.vms.remove(*id);
                            self.forget(*id);
                            eprintln!("jvmprof serve: VM {id} expired and was deleted");
                        }
                        if !done.more {
                            break;
                        }
                    }
                    Err(e) => {
                        if !said {
                            said = true;
                            eprintln!("jvmprof serve: store maintenance failed: {e}");
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// How often the store is maintained (rollups, retention) at most.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(30);
