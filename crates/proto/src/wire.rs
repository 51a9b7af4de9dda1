//! The messages as they travel: postcard-encoded, each in a frame `[u32 length, little endian]
//! [payload]`. Names and frames are ids into per-connection tables that the sender fills before
//! it first refers to an entry, so a frame or a class name crosses a connection once.

use jvmprof_profile::{FrameKind, ThreadState};
use serde::{Deserialize, Serialize};

/// An agent connection starts with these four bytes, then frames. Anything else on the port is
/// not an agent (the collector serves HTTP there).
pub const MAGIC: [u8; 4] = *b"JVMP";
/// The protocol version this crate speaks; the collector rejects other versions by name.
/// Version 2 added [`Message::Labels`], version 3 [`Message::Trace`], version 4 the record stream
/// ([`Message::Records`], thread snapshots included) in place of tables, sample deltas and
/// snapshots; older agents (which never send them) are accepted.
pub const VERSION: u16 = 4;
/// The oldest version the decoder accepts.
pub const MIN_VERSION: u16 = 1;
/// Most labels an agent may send, and the longest key and value (bytes).
pub const MAX_LABELS: usize = 32;
pub const MAX_LABEL_KEY: usize = 64;
pub const MAX_LABEL_VALUE: usize = 256;
/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 16 << 20;

/// The first message of a connection: who is connecting.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u16,
    pub token: Option<String>,
    pub pid: u32,
    pub command: String,
    pub jvm: String,
    pub os: String,
    pub host: String,
    pub agent_version: String,
    /// When the agent started, Unix ms: with host and pid it names the VM across reconnects.
    pub start_unix_ms: u64,
}

/// A frame definition; strings are ids into the string table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireFrame {
    pub kind: u8,
    pub class: u32,
    pub method: u32,
    pub descriptor: u32,
    pub line: u32,
}

/// A profile thread definition (the threads samples are attributed to).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireThread {
    pub tid: u64,
    pub name: u32,
}

/// What one (thread, stack, state) gained since the previous batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSample {
    pub thread: u32,
    pub stack: u32,
    pub state: u8,
    pub values: Vec<u64>,
}

/// One thread of a snapshot (xdProf's data).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireThreadState {
    pub id: i64,
    pub name: u32,
    pub group: u32,
    pub daemon: bool,
    pub state: u8,
    pub order: u64,
    /// Frame ids, top of stack first.
    pub frames: Vec<u32>,
}

/// Agent → collector.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    Hello(Hello),
    /// Defines string ids `first..first+len`; `first` must be the number already defined.
    Strings {
        first: u32,
        strings: Vec<String>,
    },
    Frames {
        first: u32,
        frames: Vec<WireFrame>,
    },
    /// Stacks of frame ids, root first.
    Stacks {
        first: u32,
        stacks: Vec<Vec<u32>>,
    },
    Threads {
        first: u32,
        threads: Vec<WireThread>,
    },
    /// The metrics (by name, e.g. `samples`, `ns`) every sample value list follows, the modes and
    /// the interval.
    Meta {
        modes: Vec<String>,
        metrics: Vec<String>,
        interval_ns: u64,
    },
    /// Sample deltas. `seq` numbers batches from 1 for the life of the agent, across connections:
    /// the collector acknowledges the batches it has stored and ignores one it already has, so
    /// a batch re-sent after a reconnect is counted once.
    Samples {
        seq: u64,
        time_unix_ms: u64,
        samples: Vec<WireSample>,
    },
    Snapshot {
        time_unix_ms: u64,
        threads: Vec<WireThreadState>,
    },
    /// What the agent had to drop while the collector was away (totals since the agent started).
    Dropped {
        snapshots: u64,
        sample_batches: u64,
        samples: u64,
    },
    /// The agent is done (the JVM exits or profiling stopped).
    Bye,
    /// The VM's labels (`service` = `checkout`, ...), right after the Hello when it has any
    /// (version 2; appended last so every earlier message keeps its encoding).
    Labels(Vec<(String, String)>),
    /// Trace mode: one chunk of method traces (crates/profile `trace::log`: length, CRC-32,
    /// payload), numbered from 1 for the life of the agent (version 3).
    Trace {
        seq: u64,
        chunk: Vec<u8>,
    },
    /// Version 4: framed record chunks (`jvmprof_profile::records`, one or more back to back),
    /// what the agent's native file holds. `seq` numbers them from 1 for the life of the agent,
    /// across connections (the stream's chunk number + 1); the collector acknowledges what it
    /// stored and ignores what it already has. `time_unix_ms`: when the agent cut them.
    Records {
        seq: u64,
        time_unix_ms: u64,
        chunk: Vec<u8>,
    },
}

impl Message {
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Strings { .. } => "Strings",
            Message::Frames { .. } => "Frames",
            Message::Stacks { .. } => "Stacks",
            Message::Threads { .. } => "Threads",
            Message::Meta { .. } => "Meta",
            Message::Samples { .. } => "Samples",
            Message::Snapshot { .. } => "Snapshot",
            Message::Dropped { .. } => "Dropped",
            Message::Bye => "Bye",
            Message::Labels(_) => "Labels",
            Message::Trace { .. } => "Trace",
            Message::Records { .. } => "Records",
        }
    }
}

/// Collector → agent: `Welcome` or `Reject` answers the Hello; then `Ack`s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// `last_seq`: the newest sample batch (version 4: record chunk) the collector has from
    /// this VM; the agent re-sends the unacknowledged ones after it.
    Welcome {
        vm_id: u64,
        last_seq: u64,
    },
    Reject {
        reason: String,
    },
    /// Every sample batch (version 4: record chunk) up to `seq` is stored durably.
    Ack {
        seq: u64,
    },
}

/// Appends one frame holding `value` to `out`.
pub fn put_frame<T: Serialize>(value: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    // Serializing our own plain data types into a Vec cannot fail.
    let mut body = postcard::to_stdvec(value).unwrap_or_default();
    out.append(&mut body);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// Splits the first complete frame off `buf`: `Ok(None)` when more bytes are needed.
pub fn take_frame(buf: &[u8]) -> Result<Option<(&[u8], usize)>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME {
        return Err(format!(
            "frame length {len} exceeds the limit of {MAX_FRAME} bytes"
        ));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((&buf[4..4 + len], 4 + len)))
}

/// Decodes one frame's payload as a `T` that must use all of it.
pub fn decode_payload<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, String> {
    match postcard::take_from_bytes::<T>(payload) {
        Ok((v, [])) => Ok(v),
        Ok((_, rest)) => Err(format!("{} bytes left over after the message", rest.len())),
        Err(e) => Err(format!("undecodable payload ({e})")),
    }
}

pub fn kind_code(k: FrameKind) -> u8 {
    match k {
        FrameKind::Java => 0,
        FrameKind::Native => 1,
        FrameKind::Synthetic => 2,
        FrameKind::AllocatedType => 3,
        FrameKind::LockClass => 4,
    }
}

pub fn kind_from(c: u8) -> Option<FrameKind> {
    Some(match c {
        0 => FrameKind::Java,
        1 => FrameKind::Native,
        2 => FrameKind::Synthetic,
        3 => FrameKind::AllocatedType,
        4 => FrameKind::LockClass,
        _ => return None,
    })
}

pub fn state_code(s: ThreadState) -> u8 {
    match s {
        ThreadState::Unknown => 0,
        ThreadState::Running => 1,
        ThreadState::Sleeping => 2,
        ThreadState::Blocked => 3,
        ThreadState::Waiting => 4,
        ThreadState::TimedWaiting => 5,
        ThreadState::Parked => 6,
        ThreadState::Native => 7,
    }
}

pub fn state_from(c: u8) -> Option<ThreadState> {
    Some(match c {
        0 => ThreadState::Unknown,
        1 => ThreadState::Running,
        2 => ThreadState::Sleeping,
        3 => ThreadState::Blocked,
        4 => ThreadState::Waiting,
        5 => ThreadState::TimedWaiting,
        6 => ThreadState::Parked,
        7 => ThreadState::Native,
        _ => return None,
    })
}
