//! The VMs the collector knows: one job, to keep every VM seen and not deleted, connected or
//! not, with its record and the newest sample batch received from it.

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
    pub(crate) fn load(records: Vec<VmRecord>, store: &Store, next_id: u64) -> Registry {
        let vms = records
            .into_iter()
            .map(|mut r| {
                // Records kept by a collector from before tokens were masked.
                r.command = mask_tokens(&r.command);
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
        }
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
                        command: mask_tokens(&h.command),
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
        for r in records {
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

/// `command` with the value of every `token=` option replaced by `***`: a command line is shown
/// in the API and the UI, and an agent's options may carry the collector's token.
pub fn mask_tokens(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    let mut rest = command;
    while let Some(at) = rest.find("token=") {
        let start = at + "token=".len();
        out.push_str(&rest[..start]);
        let value_len = rest[start..]
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(rest.len() - start);
        if value_len > 0 {
            out.push_str("***");
        }
        rest = &rest[start + value_len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_masked_in_commands() {
        assert_eq!(
            mask_tokens("java -agentpath:/a.so=server=h:1,token=s3cret,refresh=1s -jar x.jar"),
            "java -agentpath:/a.so=server=h:1,token=***,refresh=1s -jar x.jar"
        );
        assert_eq!(mask_tokens("a token=x token=y"), "a token=*** token=***");
        assert_eq!(mask_tokens("token= x"), "token= x");
        assert_eq!(mask_tokens("no secrets"), "no secrets");
        assert_eq!(mask_tokens("-Dtoken=abc"), "-Dtoken=***");
    }
}
