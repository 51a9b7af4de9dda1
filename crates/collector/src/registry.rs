//! The VMs the collector knows: one job, to keep every VM seen and not deleted, connected or
//! not, with its record and the newest sample batch received from it.

use crate::mask::Mask;
use crate::store::{Store, VmRecord, now_ms};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

struct VmState {
    record: VmRecord,
    /// Open connections (a reconnect may arrive before the old one is seen closing).
    connections: u32,
    /// The newest sample batch received (stored or queued for storing); older seqs are
    /// duplicates an agent re-sent after a reconnect.
    received_seq: u64,
}

/// Every VM seen and not deleted, connected or not.
#[derive(Default)]
pub struct Registry {
    vms: Mutex<BTreeMap<u64, VmState>>,
    /// The id the next new VM gets (ids are never reused).
    next_id: std::sync::atomic::AtomicU64,
    /// What every command line kept here goes through first.
    mask: Mask,
}

/// Why a VM cannot be deleted.
#[derive(Debug, PartialEq, Eq)]
pub enum DeleteError {
    Unknown,
    Connected,
}

/// A VM as the API lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VmView {
    #[serde(flatten)]
    pub record: VmRecord,
    pub connected: bool,
}

impl Registry {
    /// The VMs `records` hold, their command lines masked; a record whose command line the
    /// mask changed (kept before masking, or with other words) is stored again.
    pub(crate) fn load(
        records: Vec<VmRecord>,
        store: &Store,
        next_id: u64,
        mask: Mask,
    ) -> Registry {
        let vms = records
            .into_iter()
            .map(|mut r| {
                let masked = mask.apply(&r.command);
                if masked != r.command {
                    r.command = masked;
                    store.put_vm(r.clone());
                }
                (
                    r.id,
                    VmState {
                        connections: 0,
                        received_seq: store.committed(r.id),
                        record: r,
                    },
                )
            })
            .collect();
        Registry {
            vms: Mutex::new(vms),
            next_id: next_id.into(),
            mask,
        }
    }

    /// `command` as this registry keeps it (secret values hidden).
    pub fn mask(&self, command: &str) -> String {
        self.mask.apply(command)
    }

    /// The VM this hello names (same host, pid and agent start time), or a new one if
    /// `may_add` allows, and the newest batch seq received from it; `None` when it would be
    /// new and may not be added.
    pub(crate) fn connect(
        &self,
        h: &jvmprof_proto::Hello,
        store: &Store,
        may_add: impl FnOnce() -> bool,
    ) -> Option<(VmRecord, u64)> {
        let mut vms = self.vms.lock().unwrap();
        let now = now_ms();
        let existing = vms.values().find(|v| {
            v.record.host == h.host
                && v.record.pid == h.pid
                && v.record.start_unix_ms == h.start_unix_ms
        });
        if existing.is_none() && !may_add() {
            return None;
        }
        let existing = existing.map(|v| v.record.id);
        let state = match existing.and_then(|id| vms.get_mut(&id)) {
            Some(v) => v,
            None => {
                let id = store
                    .vm_id_for(&h.host, h.pid, h.start_unix_ms)
                    .unwrap_or_else(|| self.next_id.fetch_add(1, Ordering::Relaxed));
                vms.entry(id).or_insert(VmState {
                    record: VmRecord {
                        id,
                        pid: h.pid,
                        command: self.mask.apply(&h.command),
                        host: h.host.clone(),
                        jvm: h.jvm.clone(),
                        os: h.os.clone(),
                        agent_version: h.agent_version.clone(),
                        start_unix_ms: h.start_unix_ms,
                        ..VmRecord::default()
                    },
                    connections: 0,
                    // A shared store may hold batches another collector took from this VM.
                    received_seq: store.committed(id),
                })
            }
        };
        state.connections += 1;
        state.record.connected_at = now;
        state.record.last_seen = now;
        Some((state.record.clone(), state.received_seq))
    }

    /// Records batch `seq` as received; false if it was received before (a re-send).
    pub(crate) fn receive(&self, id: u64, seq: u64) -> bool {
        let mut vms = self.vms.lock().unwrap();
        match vms.get_mut(&id) {
            Some(v) if seq > v.received_seq => {
                v.received_seq = seq;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn update(&self, id: u64, f: impl FnOnce(&mut VmRecord)) -> Option<VmRecord> {
        let mut vms = self.vms.lock().unwrap();
        let v = vms.get_mut(&id)?;
        f(&mut v.record);
        Some(v.record.clone())
    }

    pub(crate) fn disconnect(&self, id: u64) {
        if let Some(v) = self.vms.lock().unwrap().get_mut(&id) {
            v.connections = v.connections.saturating_sub(1);
        }
    }

    /// Adds the VMs a shared store holds that this registry does not know (another collector
    /// took them in).
    pub fn add_stored(&self, records: Vec<VmRecord>, store: &Store) {
        let mut vms = self.vms.lock().unwrap();
        for mut r in records {
            r.command = self.mask.apply(&r.command);
            vms.entry(r.id).or_insert_with(|| VmState {
                connections: 0,
                received_seq: store.committed(r.id),
                record: r,
            });
        }
    }

    /// Forgets a VM that is not connected (its data is the store's to delete).
    pub fn remove(&self, id: u64) -> Result<VmRecord, DeleteError> {
        let mut vms = self.vms.lock().unwrap();
        match vms.get(&id) {
            None => Err(DeleteError::Unknown),
            Some(v) if v.connections > 0 => Err(DeleteError::Connected),
            Some(_) => Ok(vms.remove(&id).map(|v| v.record).unwrap_or_default()),
        }
    }

    /// The VMs with an open connection.
    pub fn connected(&self) -> std::collections::HashSet<u64> {
        let vms = self.vms.lock().unwrap();
        vms.iter()
            .filter(|(_, v)| v.connections > 0)
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn record(&self, id: u64) -> Option<VmRecord> {
        self.vms.lock().unwrap().get(&id).map(|v| v.record.clone())
    }

    pub fn list(&self) -> Vec<VmView> {
        self.vms
            .lock()
            .unwrap()
            .values()
            .map(|v| VmView {
                record: v.record.clone(),
                connected: v.connections > 0,
            })
            .collect()
    }

    /// The VM of `host`, `pid` and `origin` (in `agent_version`), or a new one if `may_add`
    /// allows, updated by `update`, with the seq its next batch gets; `None` when it would be
    /// new and may not be added.
    pub(crate) fn pushed(
        &self,
        (host, pid, origin): (String, u32, String),
        store: &Store,
        may_add: impl FnOnce() -> bool,
        update: impl FnOnce(&mut VmRecord),
    ) -> Option<(VmRecord, u64)> {
        let mut vms = self.vms.lock().unwrap();
        let found = vms
            .values()
            .find(|v| {
                v.record.host == host && v.record.pid == pid && v.record.agent_version == origin
            })
            .map(|v| v.record.id);
        let id = match found {
            Some(id) => id,
            None => {
                if !may_add() {
                    return None;
                }
                // A shared store names the VM the same on every collector.
                let id = store
                    .vm_id_for(&format!("{host} {origin}"), pid, 0)
                    .unwrap_or_else(|| self.next_id.fetch_add(1, Ordering::Relaxed));
                let now = now_ms();
                vms.insert(
                    id,
                    VmState {
                        record: VmRecord {
                            id,
                            pid,
                            host,
                            agent_version: origin,
                            start_unix_ms: now,
                            connected_at: now,
                            ..VmRecord::default()
                        },
                        connections: 0,
                        received_seq: store.committed(id),
                    },
                );
                id
            }
        };
        let state = vms.get_mut(&id)?;
        update(&mut state.record);
        state.record.last_seen = now_ms();
        state.received_seq += 1;
        Some((state.record.clone(), state.received_seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record kept unmasked (by an older collector, or with other words) is served masked
    /// and stored again masked.
    #[test]
    fn loading_masks_kept_command_lines_and_stores_them_again() {
        let dir = std::env::temp_dir().join(format!("jvmprof-registry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = Store::open(&dir).unwrap();
        let kept = |id: u64, command: &str| VmRecord {
            id,
            pid: id as u32,
            command: command.into(),
            ..VmRecord::default()
        };
        store.put_vm(kept(1, "java -Dapp.password=x Main"));
        store.put_vm(kept(2, "java Main"));
        rt.block_on(store.barrier());
        let registry = Registry::load(store.vms().unwrap(), &store, 3, Mask::default());
        let served: Vec<String> = registry
            .list()
            .into_iter()
            .map(|v| v.record.command)
            .collect();
        assert_eq!(served, ["java -Dapp.password=*** Main", "java Main"]);
        rt.block_on(store.barrier());
        let mut stored: Vec<(u64, String)> = store
            .vms()
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.command))
            .collect();
        stored.sort();
        assert_eq!(
            stored,
            [
                (1, "java -Dapp.password=*** Main".to_string()),
                (2, "java Main".to_string())
            ]
        );
        assert_eq!(registry.mask("x --secret y"), "x --secret ***");
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
