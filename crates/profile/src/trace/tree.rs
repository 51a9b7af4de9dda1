//! The joined tree's storage: every activation of every VM as a node (linked to its first
//! child and next sibling), the remote-call spans among them, the threads and VMs they ran on,
//! and what the join noted. [`crate::trace::join`] fills it; [`crate::trace::layout`] walks it.

use super::log::{Protocol, Side};
use crate::methods::MethodStat;
use std::collections::HashMap;

pub(super) const NONE: u32 = u32::MAX;

// Node flags.
pub(super) const CLIENT: u8 = 1;
pub(super) const SERVER: u8 = 2;
pub(super) const UNMATCHED: u8 = 4;
pub(super) const INCOMPLETE: u8 = 8;
/// A matched server span: shown under its client, not where its thread had it.
pub(super) const MOVED: u8 = 16;
/// A server span with exactly one child method, which is shown in its place.
pub(super) const COLLAPSED: u8 = 32;
/// At the top of its thread (not inside another activation).
pub(super) const TOP: u8 = 64;

#[derive(Clone, Debug)]
pub(super) struct Node {
    pub(super) start: i64,
    pub(super) end: i64,
    /// Into `names`: the method, or a span's label.
    pub(super) name: u32,
    pub(super) thread: u32,
    pub(super) first_child: u32,
    /// The next sibling (or the next top-level activation of the thread).
    pub(super) next: u32,
    pub(super) flags: u8,
}

impl Node {
    pub(super) fn duration(&self) -> i64 {
        self.end - self.start
    }
}

#[derive(Debug)]
pub(super) struct Span {
    pub(super) node: u32,
    pub(super) side: Side,
    pub(super) protocol: Protocol,
    pub(super) key: Box<str>,
    /// RMI: the connection, into `conns`.
    pub(super) conn: u32,
    /// The span on the other side, once matched.
    pub(super) peer: u32,
}

#[derive(Debug)]
pub(super) struct ThreadInfo {
    pub(super) vm: u32,
    pub(super) id: u64,
    pub(super) name: String,
    pub(super) first_top: u32,
}

#[derive(Debug, Default)]
pub(super) struct VmInfo {
    pub(super) name: String,
    pub(super) dropped_calls: u64,
    pub(super) surplus_exits: u64,
    pub(super) incomplete: u64,
}

/// The joined tree of several VMs' traces.
pub struct Joined {
    pub(super) nodes: Vec<Node>,
    pub(super) spans: Vec<Span>,
    pub(super) threads: Vec<ThreadInfo>,
    pub(super) vms: Vec<VmInfo>,
    pub(super) names: Vec<String>,
    /// Top-level nodes shown as roots, by VM then start.
    pub(super) roots: Vec<u32>,
    /// Where each VM's roots go on the viewers' common timeline.
    pub(super) vm_offset: Vec<i64>,
    pub(super) groups: Vec<Vec<u32>>,
    pub(super) notes: Vec<String>,
    pub(super) stats: Vec<Vec<MethodStat>>,
    /// Top-level node → its call tree id (see [`NodeView::trace_id`]).
    pub(super) contexts: HashMap<u32, u64>,
}

impl Joined {
    /// The VM names, in input order.
    pub fn vms(&self) -> impl Iterator<Item = &str> {
        self.vms.iter().map(|v| v.name.as_str())
    }

    /// What the join noticed: damage, dropped and incomplete calls, unmatched calls, VMs that
    /// share no call.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Groups of VMs (indices) that remote calls connect; one per separate tree family.
    pub fn groups(&self) -> &[Vec<u32>] {
        &self.groups
    }

    /// Per VM (in input order): every method's count and inclusive times, by total descending.
    pub fn stats(&self) -> impl Iterator<Item = (&str, &[MethodStat])> {
        self.vms
            .iter()
            .zip(&self.stats)
            .map(|(v, s)| (v.name.as_str(), s.as_slice()))
    }

    /// The number of roots.
    pub fn root_count(&self) -> usize {
        self.roots.len()
    }

    pub(super) fn span_of(&self, node: u32) -> Option<&Span> {
        self.spans
            .binary_search_by_key(&node, |s| s.node)
            .ok()
            .map(|i| &self.spans[i])
    }
}
