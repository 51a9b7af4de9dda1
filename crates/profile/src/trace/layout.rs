//! How the joined tree is shown: which node stands for a collapsed server span, the depth-first
//! walk every writer uses ([`Joined::walk`], without recursion), the roots, the matches undone
//! because they would make a loop, and each VM's place on the viewers' common timeline.

use super::log::Side;
use super::tree::{CLIENT, COLLAPSED, INCOMPLETE, Joined, MOVED, NONE, SERVER, TOP, UNMATCHED};
use std::collections::HashMap;

/// What the HTML page and the Chrome trace say about their common timeline.
pub const PLACEMENT_NOTE: &str = "server times are placed inside their client calls (centred), \
     not synchronised; other activity of a VM that serves calls is shifted by the median \
     placement of those calls";

/// Which side of a remote call a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The caller's side: the remote method as called, on the caller's clock.
    Client,
    /// The callee's side: the served method, on the server's clock.
    Server,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Server => "server",
        }
    }
}

/// One node of the joined tree as [`Joined::walk`] shows it.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    pub vm: &'a str,
    pub thread: &'a str,
    pub method: &'a str,
    /// On the node's own VM clock.
    pub start_ns: i64,
    pub duration_ns: i64,
    pub kind: Option<Kind>,
    pub unmatched: bool,
    pub incomplete: bool,
    /// Roots are 0.
    pub depth: usize,
    /// The start on the viewers' common timeline (see [`PLACEMENT_NOTE`]).
    pub placed_ns: i64,
    /// The VM's place among the inputs.
    pub vm_index: usize,
    /// The thread's place among all threads of all VMs.
    pub thread_index: usize,
    /// `Thread.getId()` on its VM.
    pub thread_id: u64,
    /// For both sides of a matched remote call, the same number.
    pub call: Option<u32>,
    /// On a node that starts a call tree on its thread (a root, a served remote call, a task
    /// handed over from another tree): the id the samples taken in that tree carry (trace
    /// mode beside cpu or wall sampling; `jvmprof convert FILE --trace-id ID` cuts them out).
    pub trace_id: Option<u64>,
    pub(super) name: u32,
}

/// A step of a depth-first walk: a node starts (its children follow), or the innermost open
/// node ends.
#[derive(Clone, Copy, Debug)]
pub enum Visit<'a> {
    Open(NodeView<'a>),
    Close,
}

/// What a node is shown as: a collapsed server span shows its only child.
#[derive(Clone, Copy)]
struct Shown {
    node: u32,
    flags: u8,
    /// The span node, for a server span shown as its child.
    span_node: u32,
}

/// A frame of the walk's explicit stack.
struct Frame {
    node: u32,
    cursor: u32,
    attached: u32,
    offset: i64,
}

impl Joined {
    fn shown(&self, node: u32) -> Shown {
        let n = &self.nodes[node as usize];
        if n.flags & COLLAPSED != 0 {
            let c = n.first_child;
            Shown {
                node: c,
                flags: (n.flags & (SERVER | UNMATCHED | INCOMPLETE))
                    | (self.nodes[c as usize].flags & INCOMPLETE),
                span_node: node,
            }
        } else {
            Shown {
                node,
                flags: n.flags,
                span_node: node,
            }
        }
    }

    pub(super) fn collect_roots(&mut self) {
        let mut roots = Vec::new();
        for t in &self.threads {
            let mut n = t.first_top;
            while n != NONE {
                if self.nodes[n as usize].flags & MOVED == 0 {
                    roots.push(n);
                }
                n = self.nodes[n as usize].next;
            }
        }
        self.sort_roots(&mut roots);
        self.roots = roots;
    }

    fn sort_roots(&self, roots: &mut [u32]) {
        roots.sort_unstable_by_key(|&r| {
            let n = &self.nodes[r as usize];
            (self.threads[n.thread as usize].vm, n.start, n.thread, r)
        });
    }

    /// Walks the joined tree depth first: `Open` for every node, `Close` after its children.
    /// Stops at the first error `visit` returns.
    pub fn walk<'a, E>(
        &'a self,
        mut visit: impl FnMut(Visit<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut stack: Vec<Frame> = Vec::new();
        for &root in &self.roots {
            let shown = self.shown(root);
            let vm = self.threads[self.nodes[shown.node as usize].thread as usize].vm;
            let offset = self.vm_offset[vm as usize];
            visit(Visit::Open(self.view(shown, 0, offset)))?;
            stack.push(self.frame(shown.node, offset));
            while let Some(top) = stack.last_mut() {
                let mut next = None;
                while top.cursor != NONE {
                    let c = top.cursor;
                    top.cursor = self.nodes[c as usize].next;
                    if self.nodes[c as usize].flags & MOVED == 0 {
                        next = Some((c, top.offset));
                        break;
                    }
                }
                if next.is_none() && top.attached != NONE {
                    let s = top.attached;
                    top.attached = NONE;
                    let client = &self.nodes[top.node as usize];
                    let server = &self.nodes[self.shown(s).node as usize];
                    let offset =
                        client.start + top.offset + (client.duration() - server.duration()) / 2
                            - server.start;
                    next = Some((s, offset));
                }
                match next {
                    Some((c, offset)) => {
                        let shown = self.shown(c);
                        visit(Visit::Open(self.view(shown, stack.len(), offset)))?;
                        stack.push(self.frame(shown.node, offset));
                    }
                    None => {
                        stack.pop();
                        visit(Visit::Close)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn frame(&self, node: u32, offset: i64) -> Frame {
        let n = &self.nodes[node as usize];
        let attached = if n.flags & CLIENT != 0 {
            self.span_of(node)
                .filter(|s| s.peer != NONE)
                .map_or(NONE, |s| self.spans[s.peer as usize].node)
        } else {
            NONE
        };
        Frame {
            node,
            cursor: n.first_child,
            attached,
            offset,
        }
    }

    fn view(&self, shown: Shown, depth: usize, offset: i64) -> NodeView<'_> {
        let n = &self.nodes[shown.node as usize];
        let t = &self.threads[n.thread as usize];
        let kind = if shown.flags & CLIENT != 0 {
            Some(Kind::Client)
        } else if shown.flags & SERVER != 0 {
            Some(Kind::Server)
        } else {
            None
        };
        let call = match kind {
            Some(Kind::Client) => self
                .span_of(shown.span_node)
                .filter(|s| s.peer != NONE)
                .map(|_| shown.span_node),
            Some(Kind::Server) => self
                .span_of(shown.span_node)
                .filter(|s| s.peer != NONE)
                .map(|s| self.spans[s.peer as usize].node),
            None => None,
        };
        NodeView {
            vm: &self.vms[t.vm as usize].name,
            thread: &t.name,
            method: &self.names[n.name as usize],
            start_ns: n.start,
            duration_ns: n.duration(),
            kind,
            unmatched: shown.flags & UNMATCHED != 0,
            incomplete: shown.flags & INCOMPLETE != 0,
            depth,
            placed_ns: n.start.saturating_add(offset),
            vm_index: t.vm as usize,
            thread_index: n.thread as usize,
            thread_id: t.id,
            call,
            trace_id: self
                .contexts
                .get(&shown.node)
                .or_else(|| self.contexts.get(&shown.span_node))
                .copied(),
            name: n.name,
        }
    }

    /// The nodes a walk reaches (by the node shown), to find matches that made a cycle.
    fn reached(&self) -> Vec<bool> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<u32> = self.roots.iter().map(|&r| self.shown(r).node).collect();
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut seen[n as usize], true) {
                continue;
            }
            let f = self.frame(n, 0);
            let mut c = f.cursor;
            while c != NONE {
                if self.nodes[c as usize].flags & MOVED == 0 {
                    stack.push(self.shown(c).node);
                }
                c = self.nodes[c as usize].next;
            }
            if f.attached != NONE {
                stack.push(self.shown(f.attached).node);
            }
        }
        seen
    }

    /// A match whose server span is an ancestor of its own client (possible only with
    /// inconsistent recordings) would hide a loop of nodes from every root: undo such matches.
    pub(super) fn break_cycles(&mut self) {
        let mut undone = 0u64;
        loop {
            let seen = self.reached();
            let lost = self.spans.iter().position(|s| {
                s.side == Side::Server && s.peer != NONE && !seen[self.shown(s.node).node as usize]
            });
            let Some(i) = lost else { break };
            let client = self.spans[i].peer as usize;
            self.spans[i].peer = NONE;
            self.spans[client].peer = NONE;
            let (sn, cn) = (self.spans[i].node, self.spans[client].node);
            self.nodes[cn as usize].flags |= UNMATCHED;
            let n = &mut self.nodes[sn as usize];
            n.flags = (n.flags & !MOVED) | UNMATCHED;
            if n.flags & TOP != 0 {
                let mut roots = std::mem::take(&mut self.roots);
                roots.push(sn);
                self.sort_roots(&mut roots);
                self.roots = roots;
            }
            undone += 1;
        }
        if undone > 0 {
            self.notes.push(format!(
                "{undone} remote-call matches would have made a loop (a call serving itself) \
                 and were left unmatched"
            ));
        }
    }

    /// Groups the VMs that calls connect (a note names the groups when there are several) and
    /// places each VM's roots on the common timeline.
    pub(super) fn group_and_place(&mut self) {
        let v = self.vms.len();
        let mut parent: Vec<usize> = (0..v).collect();
        fn find(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        }
        // Offsets of served calls by (client VM, server VM).
        let mut edges: HashMap<(u32, u32), Vec<i64>> = HashMap::new();
        for s in self
            .spans
            .iter()
            .filter(|s| s.side == Side::Client && s.peer != NONE)
        {
            let client = &self.nodes[s.node as usize];
            let server_span = self.spans[s.peer as usize].node;
            let server = &self.nodes[self.shown(server_span).node as usize];
            let (a, b) = (
                self.threads[client.thread as usize].vm,
                self.threads[server.thread as usize].vm,
            );
            let (ra, rb) = (find(&mut parent, a as usize), find(&mut parent, b as usize));
            parent[ra.max(rb)] = ra.min(rb);
            if a != b {
                edges.entry((a, b)).or_default().push(
                    client.start + (client.duration() - server.duration()) / 2 - server.start,
                );
            }
        }
        let mut groups: Vec<Vec<u32>> = Vec::new();
        let mut group_of = vec![usize::MAX; v];
        for i in 0..v {
            let r = find(&mut parent, i);
            if group_of[r] == usize::MAX {
                group_of[r] = groups.len();
                groups.push(Vec::new());
            }
            groups[group_of[r]].push(i as u32);
        }
        // Relative offsets: the median placement of each VM pair's calls, spread from each
        // group's first VM.
        let mut adj: Vec<Vec<(u32, i64)>> = vec![Vec::new(); v];
        for ((a, b), mut offs) in edges {
            let mid = offs.len() / 2;
            let (_, m, _) = offs.select_nth_unstable(mid);
            let m = *m;
            adj[a as usize].push((b, m));
            adj[b as usize].push((a, -m));
        }
        let mut placed = vec![false; v];
        let mut offset = vec![0i64; v];
        for g in &groups {
            let first = g[0] as usize;
            placed[first] = true;
            let mut queue = vec![first];
            while let Some(a) = queue.pop() {
                for &(b, m) in &adj[a] {
                    if !placed[b as usize] {
                        placed[b as usize] = true;
                        offset[b as usize] = offset[a] + m;
                        queue.push(b as usize);
                    }
                }
            }
        }
        // Unrelated groups start where the first one starts.
        let mut group_start = vec![i64::MAX; groups.len()];
        for &r in &self.roots {
            let n = &self.nodes[r as usize];
            let vm = self.threads[n.thread as usize].vm as usize;
            let g = group_of[find(&mut parent, vm)];
            group_start[g] = group_start[g].min(n.start + offset[vm]);
        }
        if let Some(&first) = group_start.first() {
            for (g, members) in groups.iter().enumerate() {
                if group_start[g] == i64::MAX || first == i64::MAX {
                    continue;
                }
                let shift = first - group_start[g];
                for &m in members {
                    offset[m as usize] += shift;
                }
            }
        }
        self.vm_offset = offset;
        if groups.len() > 1 {
            let named: Vec<String> = groups
                .iter()
                .map(|g| {
                    let names: Vec<&str> = g
                        .iter()
                        .map(|&i| self.vms[i as usize].name.as_str())
                        .collect();
                    format!("[{}]", names.join(", "))
                })
                .collect();
            self.notes.push(format!(
                "no remote call connects these groups of VMs, so their trees are separate \
                 (unrelated runs?): {}",
                named.join("; ")
            ));
        }
        self.groups = groups;
    }

    /// The earliest start on the common timeline.
    pub(super) fn placed_base(&self) -> i64 {
        let mut base = i64::MAX;
        let _ = self.walk(|v| {
            if let Visit::Open(n) = v {
                base = base.min(n.placed_ns);
            }
            Ok::<(), ()>(())
        });
        if base == i64::MAX { 0 } else { base }
    }
}
