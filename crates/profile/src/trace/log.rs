//! Method traces of trace mode (JaViz): every call of the traced methods, with its entry and
//! exit times on its thread, and the remote calls each VM made and served, as the agent
//! records them — one [`VmTrace`] per JVM. `jvmprof trace` joins several into one tree.
//!
//! On disk the traces follow the profile in the native file (see [`crate::native`]): the
//! marker [`SECTION`], then chunks as the agent drained them, each `u32` length, `u32` CRC-32
//! of the payload (both little-endian) and the payload, a postcard-encoded [`Chunk`]. A file
//! cut short or damaged is read up to the last whole chunk, and the reader says where it
//! stopped. Times are nanoseconds of the recording VM's own monotonic clock: never compared
//! across VMs.

use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// The marker before the first chunk.
pub const SECTION: &[u8; 8] = b"JVMTRACE";
/// The largest chunk accepted (a damaged length must not allocate gigabytes).
pub const MAX_CHUNK: u32 = 64 << 20;

/// Which side of a remote call a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Side {
    Client,
    Server,
}

/// The remote-call protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// Java RMI (JRMP over TCP).
    Rmi,
    /// HTTP: `HttpURLConnection` and `java.net.http.HttpClient` clients, `com.sun.net.httpserver`.
    Http,
}

/// One thing a thread did, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A traced method starts (`method` indexes [`VmTrace::methods`]).
    Enter { method: u32, ns: i64 },
    /// The innermost open activation (method or remote span) ends.
    Exit { ns: i64 },
    /// A remote call starts, on the calling or the serving side; the next unmatched `Exit`
    /// ends it. `key` identifies the call without any clock: for HTTP the caller's call id
    /// (the `X-Jvmprof-Call` header; empty on a server called without one); for RMI the
    /// remote object's class and method. `label` is what a viewer shows (the remote method as
    /// called, `GET http://host/path`, the served object).
    Remote {
        side: Side,
        protocol: Protocol,
        key: String,
        label: String,
        ns: i64,
    },
    /// The TCP connection this thread uses for RMI from now on: its own and the peer's
    /// `address:port`. Before a client call's request, and when a server thread takes a
    /// connection or answers on it.
    Connection {
        local: String,
        remote: String,
        ns: i64,
    },
    /// Right after the entry of a thread's outermost traced activation (a method or a remote
    /// span with nothing traced below it on the thread): the call tree it belongs to, the id
    /// that cpu and wall samples taken in it carry. A new tree's id is the thread's id and the
    /// tree's number on the thread (`thread_id << 30 | n`); work handed to an executor keeps the
    /// submitting tree's id. `ns` is the entry's time.
    Context { id: u64, ns: i64 },
    /// The thread's name from here on: before its first call tree, and before the first tree
    /// after it was renamed (RMI names a thread after the connection it serves).
    Thread { name: String, ns: i64 },
}

impl Event {
    pub fn ns(&self) -> i64 {
        match self {
            Event::Enter { ns, .. }
            | Event::Exit { ns }
            | Event::Remote { ns, .. }
            | Event::Connection { ns, .. }
            | Event::Context { ns, .. }
            | Event::Thread { ns, .. } => *ns,
        }
    }
}

/// One thread's events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadTrace {
    /// `Thread.getId()`.
    pub id: u64,
    pub name: String,
    pub events: Vec<Event>,
}

/// What one VM recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmTrace {
    /// The VM's name in joined trees (`vm_name`, default `host:pid`).
    pub vm: String,
    /// A random number drawn when the session started: the prefix of its HTTP call ids.
    pub session: u64,
    pub host: String,
    pub pid: u32,
    /// Method names by id (`pkg.Class.method`).
    pub methods: Vec<String>,
    pub threads: Vec<ThreadTrace>,
    /// Calls not recorded because their thread's buffer was full (each a whole call: its
    /// entry and exit both left out).
    pub dropped_calls: u64,
}

impl VmTrace {
    /// The calls recorded (method entries).
    pub fn calls(&self) -> usize {
        self.threads
            .iter()
            .map(|th| {
                th.events
                    .iter()
                    .filter(|e| matches!(e, Event::Enter { .. }))
                    .count()
            })
            .sum()
    }
}

/// One drained batch, as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    /// The VM, in the first chunk only.
    pub vm: Option<VmHeader>,
    /// Methods first named in this chunk: (id, name).
    pub methods: Vec<(u32, String)>,
    /// Threads first seen in this chunk: (id, name).
    pub threads: Vec<(u64, String)>,
    /// Events by thread id, in order within each thread.
    pub events: Vec<(u64, Vec<Event>)>,
    /// Calls dropped so far (cumulative).
    pub dropped_calls: u64,
}

/// The VM fields of [`VmTrace`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmHeader {
    pub vm: String,
    pub session: u64,
    pub host: String,
    pub pid: u32,
}

/// Appends one chunk (length, CRC-32, payload).
pub fn write_chunk(chunk: &Chunk, mut out: impl Write) -> io::Result<()> {
    let payload = postcard::to_allocvec(chunk).map_err(io::Error::other)?;
    if payload.len() > MAX_CHUNK as usize {
        return Err(io::Error::other("trace chunk over 64 MiB"));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&payload);
    out.write_all(&(payload.len() as u32).to_le_bytes())?;
    out.write_all(&crc.finalize().to_le_bytes())?;
    out.write_all(&payload)
}

/// One chunk's payload (what follows its length and checksum), decoded.
pub fn decode_chunk(payload: &[u8]) -> Result<Chunk, String> {
    postcard::from_bytes(payload).map_err(|e| format!("a chunk does not decode: {e}"))
}

/// Reads the chunks after the section marker into one [`VmTrace`]. Stops at the first chunk
/// that is cut short or damaged; then the second value says where and why (`origin` names
/// the file in that message).
pub fn read_chunks(mut bytes: &[u8], origin: &str) -> (VmTrace, Option<String>) {
    let mut t = VmTrace::default();
    let mut offset = 0usize;
    let mut count = 0usize;
    let mut by_id: std::collections::HashMap<u64, usize> = Default::default();
    let damage = loop {
        if bytes.is_empty() {
            break None;
        }
        if bytes.len() < 8 {
            break Some(format!(
                "a chunk header is cut short ({} bytes)",
                bytes.len()
            ));
        }
        let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if len > MAX_CHUNK {
            break Some(format!("a chunk claims {len} bytes"));
        }
        let Some(payload) = bytes.get(8..8 + len as usize) else {
            break Some(format!(
                "a chunk of {len} bytes is cut short ({} there)",
                bytes.len() - 8
            ));
        };
        let mut h = crc32fast::Hasher::new();
        h.update(payload);
        if h.finalize() != crc {
            break Some("a chunk's checksum does not match".to_string());
        }
        let chunk: Chunk = match postcard::from_bytes(payload) {
            Ok(c) => c,
            Err(e) => break Some(format!("a chunk does not decode: {e}")),
        };
        merge(&mut t, chunk, &mut by_id);
        count += 1;
        offset += 8 + len as usize;
        bytes = &bytes[8 + len as usize..];
    };
    let message = damage.map(|why| {
        let calls = t.calls();
        format!(
            "{origin}: the trace is damaged {offset} bytes into its trace section ({why}); \
             read up to there: {count} chunks, {calls} calls"
        )
    });
    (t, message)
}

/// How far method ids may run past twice the methods named so far. Agents number methods from
/// 0 as they name them, so ids stay close to the names seen (a gap only where chunks were
/// dropped); a damaged or hostile chunk naming method 4,000,000,000 would otherwise make a
/// table of 96 GB.
const METHOD_ID_SLACK: usize = 1 << 16;

/// Adds a chunk to the traces read so far (`by_id`: thread id → index in `t.threads`). A method
/// named with an id past [`METHOD_ID_SLACK`] beyond twice the names seen stays unnamed (the
/// join shows it as `[method N]`).
pub fn merge(t: &mut VmTrace, c: Chunk, by_id: &mut std::collections::HashMap<u64, usize>) {
    if let Some(vm) = c.vm {
        t.vm = vm.vm;
        t.session = vm.session;
        t.host = vm.host;
        t.pid = vm.pid;
    }
    // Counted only when an id is that far out, once per chunk.
    let mut named: Option<usize> = None;
    for (id, name) in c.methods {
        let i = id as usize;
        if t.methods.len() <= i {
            if i >= METHOD_ID_SLACK {
                let n =
                    named.get_or_insert_with(|| t.methods.iter().filter(|m| !m.is_empty()).count());
                *n += 1;
                if i >= METHOD_ID_SLACK + 2 * *n {
                    continue;
                }
            }
            t.methods.resize(i + 1, String::new());
        }
        t.methods[i] = name;
    }
    for (id, name) in c.threads {
        let at = *by_id.entry(id).or_insert_with(|| {
            t.threads.push(ThreadTrace {
                id,
                name: String::new(),
                events: Vec::new(),
            });
            t.threads.len() - 1
        });
        t.threads[at].name = name;
    }
    for (id, events) in c.events {
        let at = *by_id.entry(id).or_insert_with(|| {
            t.threads.push(ThreadTrace {
                id,
                name: format!("thread {id}"),
                events: Vec::new(),
            });
            t.threads.len() - 1
        });
        t.threads[at].events.extend(events);
    }
    t.dropped_calls = t.dropped_calls.max(c.dropped_calls);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(first: bool, n: i64) -> Chunk {
        Chunk {
            vm: first.then(|| VmHeader {
                vm: "a:1".into(),
                session: 7,
                host: "a".into(),
                pid: 1,
            }),
            methods: if first {
                vec![(0, "A.run".into())]
            } else {
                vec![]
            },
            threads: if first {
                vec![(1, "main".into())]
            } else {
                vec![]
            },
            events: vec![(
                1,
                vec![Event::Enter { method: 0, ns: n }, Event::Exit { ns: n + 5 }],
            )],
            dropped_calls: n as u64,
        }
    }

    /// A chunk naming method 4,000,000,000 does not make a table that long; ids near the names
    /// seen (a gap where chunks were dropped) are kept.
    #[test]
    fn far_method_ids_are_not_a_table_of_that_size() {
        let mut c = chunk(true, 10);
        c.methods.push((4_000_000_000, "Far.away".into()));
        c.methods.push((70_000, "Gap.after_drops".into()));
        let mut bytes = Vec::new();
        write_chunk(&c, &mut bytes).unwrap();
        let (t, damage) = read_chunks(&bytes, "x");
        assert!(damage.is_none());
        assert_eq!(t.methods.len(), 1);
        let mut near = chunk(false, 20);
        near.methods = (1..=3000u32).map(|i| (i, format!("M.m{i}"))).collect();
        near.methods.push((65_000, "Gap.small".into()));
        let mut bytes = Vec::new();
        write_chunk(&chunk(true, 10), &mut bytes).unwrap();
        write_chunk(&near, &mut bytes).unwrap();
        let (t, _) = read_chunks(&bytes, "x");
        assert_eq!(t.methods.len(), 65_001);
        assert_eq!(t.methods[65_000], "Gap.small");
        assert_eq!(t.methods[3000], "M.m3000");
    }

    #[test]
    fn chunks_round_trip_and_damage_is_named() {
        let mut bytes = Vec::new();
        write_chunk(&chunk(true, 10), &mut bytes).unwrap();
        let first = bytes.len();
        write_chunk(&chunk(false, 20), &mut bytes).unwrap();
        let (t, damage) = read_chunks(&bytes, "x.jvmprof");
        assert!(damage.is_none());
        assert_eq!(t.vm, "a:1");
        assert_eq!(t.methods, vec!["A.run".to_string()]);
        assert_eq!(t.threads.len(), 1);
        assert_eq!(t.threads[0].events.len(), 4);
        assert_eq!(t.dropped_calls, 20);
        // Cut inside the second chunk: the first is read, the message names file and place.
        for cut in [first + 3, first + 9, bytes.len() - 1] {
            let (t, damage) = read_chunks(&bytes[..cut], "x.jvmprof");
            assert_eq!(t.threads[0].events.len(), 2, "cut at {cut}");
            let m = damage.unwrap();
            assert!(m.starts_with("x.jvmprof: the trace is damaged "), "{m}");
            assert!(
                m.contains(&format!("{first} bytes")) && m.contains("1 chunks, 1 calls"),
                "{m}"
            );
        }
        // A flipped byte fails the checksum.
        let mut bad = bytes.clone();
        bad[first + 12] ^= 0x40;
        let (_, damage) = read_chunks(&bad, "y");
        assert!(damage.unwrap().contains("checksum"));
    }
}
