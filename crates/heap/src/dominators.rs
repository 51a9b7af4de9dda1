//! Dominators and retained sizes, by the semi-NCA algorithm (Georgiadis and Tarjan's simple
//! variant of Lengauer–Tarjan: semidominators by path-compressed evaluation over a DFS tree,
//! then each immediate dominator as the nearest common ancestor of parent and semidominator).
//!
//! The graph is the heap's CSR successor lists plus one virtual root whose successors are the
//! GC roots. Everything runs in DFS-number space on flat `u32` arrays, iteratively (object
//! graphs are deep: a linked list of a million nodes is a million-deep DFS), and in steps that
//! each hold few per-object arrays, the others waiting in temporary files ([`crate::spill`]):
//!
//! 1. The DFS keeps only the preorder numbers beside the graph; tree parents, the vertex order
//!    and the non-tree edges go to spills as they are found. A node's predecessors are its tree
//!    parent and the sources of its non-tree edges, and on heaps most objects have one referrer,
//!    so the non-tree edges are few; the graph is freed after the DFS.
//! 2. Semidominators in reverse preorder over three arrays: the linked forest's ancestors start
//!    as the DFS parents and share their array (only linked nodes are ever compressed, and a
//!    node is linked once processed), with the non-tree edges sorted by target.
//! 3. Immediate dominators from the parents, reloaded, and the semidominators.
//! 4. The dominator tree renumbered in its own preorder ([`DomTree`]), where every subtree is a
//!    contiguous range: subtree sizes, shallow sizes with block prefix sums (a retained size is
//!    the sum over a range) and classes are all the analysis needs; each node's object index is
//!    spilled.

use crate::error::Result;
use crate::graph::{Graph, NONE};
use crate::spill::{Spill, SpillWriter};

/// The virtual root's place in an immediate-dominator array: the object is dominated by the GC
/// roots as a whole (a top-level dominator).
pub const TOP: u32 = u32::MAX - 1;

/// Shallow sizes are summed from a prefix kept every this many nodes.
const BLOCK: usize = 16;

enum Column {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

/// The dominator tree of the reachable objects, numbered in its preorder (top-level dominators,
/// children of the virtual root, in DFS order; each node's children in DFS order after it). A
/// node `t`'s subtree, the objects it retains, is `t..t + size(t)`.
pub struct DomTree {
    size: Vec<u32>,
    shallow: Vec<u32>,
    /// `blocks[b]` is the sum of `shallow[..b * BLOCK]`.
    blocks: Vec<u64>,
    class: Column,
    /// Tree position -> object index.
    object: Spill<u32>,
}

impl DomTree {
    /// Reachable objects.
    pub fn len(&self) -> usize {
        self.size.len()
    }

    pub fn is_empty(&self) -> bool {
        self.size.is_empty()
    }

    /// Nodes in `t`'s subtree, itself included.
    pub fn size(&self, t: u32) -> u32 {
        self.size[t as usize]
    }

    /// The position after `t`'s subtree.
    pub fn end(&self, t: u32) -> u32 {
        t + self.size[t as usize]
    }

    pub fn shallow(&self, t: u32) -> u32 {
        self.shallow[t as usize]
    }

    /// The class-table index of `t`'s object.
    pub fn class(&self, t: u32) -> u32 {
        match &self.class {
            Column::Narrow(c) => u32::from(c[t as usize]),
            Column::Wide(c) => c[t as usize],
        }
    }

    /// Sum of the shallow sizes of the nodes before position `t`.
    fn prefix(&self, t: usize) -> u64 {
        let b = t / BLOCK;
        self.blocks[b]
            + self.shallow[b * BLOCK..t]
                .iter()
                .map(|&s| u64::from(s))
                .sum::<u64>()
    }

    /// Bytes retained by `t`: its own and those of every object it dominates.
    pub fn retained(&self, t: u32) -> u64 {
        self.prefix(self.end(t) as usize) - self.prefix(t as usize)
    }

    /// Shallow bytes of all reachable objects.
    pub fn total(&self) -> u64 {
        self.prefix(self.len())
    }

    /// The nodes `t` immediately dominates, in tree order.
    pub fn children(&self, t: u32) -> impl Iterator<Item = u32> + '_ {
        self.siblings(t + 1, self.end(t))
    }

    /// The top-level dominators (held by the GC roots as a whole), in tree order.
    pub fn top(&self) -> impl Iterator<Item = u32> + '_ {
        self.siblings(0, self.len() as u32)
    }

    /// The subtrees that tile `from..end`, in order.
    fn siblings(&self, from: u32, end: u32) -> impl Iterator<Item = u32> + '_ {
        let mut next = from;
        std::iter::from_fn(move || {
            let c = next;
            (c < end).then(|| {
                next = self.end(c);
                c
            })
        })
    }

    /// The object index of node `t` (one read of a temporary file).
    pub fn object(&self, t: u32) -> Result<u32> {
        self.object.get(t as usize)
    }

    /// Object indices of all nodes, in tree order, on disk.
    pub fn objects(&self) -> &Spill<u32> {
        &self.object
    }
}

/// Computes the dominator tree of every object reachable from `roots`; `shallow` and
/// `class_of` are per-object columns, `classes` the size of the class table. Consumes the graph
/// (it is freed as soon as the DFS is done).
pub fn compute(
    graph: Graph,
    roots: &[u32],
    shallow: &Spill<u32>,
    class_of: &Spill<u32>,
    classes: usize,
) -> Result<DomTree> {
    let n = shallow.len();
    let mut roots = roots.to_vec();
    roots.sort_unstable();
    roots.dedup();

    // 1. DFS from the virtual root (DFS number 0): preorder numbers in RAM; vertex order, tree
    //    parents and non-tree edges (target << 32 | source, in DFS numbers) spilled.
    let mut vertex = SpillWriter::<u32>::new()?;
    let mut parent = SpillWriter::<u32>::new()?;
    let mut cross = SpillWriter::<u64>::new()?;
    vertex.push(NONE)?;
    parent.push(NONE)?;
    {
        let Graph { starts, edges } = &graph;
        let mut dfn = vec![NONE; n];
        let mut next = 1u32;
        // (object, its DFS number, position of its next successor)
        let mut stack: Vec<(u32, u32, u32)> = Vec::new();
        for &r in &roots {
            if dfn[r as usize] != NONE {
                cross.push(u64::from(dfn[r as usize]) << 32)?;
                continue;
            }
            dfn[r as usize] = next;
            vertex.push(r)?;
            parent.push(0)?;
            stack.push((r, next, starts[r as usize]));
            next += 1;
            while let Some(top) = stack.last_mut() {
                let (v, dv, k) = *top;
                if k < starts[v as usize + 1] {
                    top.2 += 1;
                    let w = edges[k as usize];
                    let dw = dfn[w as usize];
                    if dw == NONE {
                        dfn[w as usize] = next;
                        vertex.push(w)?;
                        parent.push(dv)?;
                        stack.push((w, next, starts[w as usize]));
                        next += 1;
                    } else {
                        cross.push(u64::from(dw) << 32 | u64::from(dv))?;
                    }
                } else {
                    stack.pop();
                }
            }
        }
    }
    drop(graph);
    let (vertex, parent, cross_edges) = (vertex.finish()?, parent.finish()?, cross.finish()?);
    let count = vertex.len();
    crate::mem_note(&format!("dfs ({} non-tree edges)", cross_edges.len()));

    // 2. Semidominators, in reverse preorder, with path-compressed evaluation.
    let mut semi: Vec<u32> = (0..count as u32).collect();
    {
        let mut cross = cross_edges.load()?;
        drop(cross_edges);
        cross.sort_unstable();
        let mut ancestor = parent.load()?;
        let mut label: Vec<u32> = (0..count as u32).collect();
        let mut path = Vec::new();
        let mut c = cross.len();
        for w in (1..count).rev() {
            // Not linked yet, so still the DFS parent: a predecessor, and a candidate.
            let mut s = ancestor[w];
            while c > 0 && (cross[c - 1] >> 32) as usize == w {
                c -= 1;
                let v = cross[c] as u32;
                let u = eval(v, w as u32, &mut ancestor, &mut label, &semi, &mut path);
                s = s.min(semi[u as usize]);
            }
            semi[w] = s;
        }
        crate::mem_note("semidominators");
    }

    // 3. Immediate dominators: walk up from the parent until below the semidominator.
    let mut idom = parent.load()?;
    drop(parent);
    for w in 1..count {
        let mut d = idom[w];
        while d > semi[w] {
            d = idom[d as usize];
        }
        idom[w] = d;
    }
    drop(semi);

    // 4. The tree's preorder. Subtree sizes first (each node after its dominator in DFS order,
    //    so a reverse sweep adds each to its dominator), then positions: a node takes the next
    //    free place among its dominator's children, which moves on by its size. One array holds
    //    the size, then the next free place, and ends as the end of the subtree.
    let len = count - 1;
    let mut end = vec![1u32; count];
    for w in (1..count).rev() {
        end[idom[w] as usize] += end[w];
    }
    end[0] = 0;
    let mut pos = vec![0u32; count];
    for w in 1..count {
        let d = idom[w] as usize;
        let size = end[w];
        pos[w] = end[d];
        end[d] += size;
        end[w] = pos[w] + 1;
    }
    drop(idom);
    let mut size = vec![0u32; len];
    for w in 1..count {
        size[pos[w] as usize] = end[w] - pos[w];
    }
    drop(end);
    let object = {
        let mut by_pos = vec![0u32; len];
        let mut r = vertex.reader();
        r.next_value()?;
        for &p in &pos[1..] {
            by_pos[p as usize] = r.next_value()?;
        }
        drop(pos);
        Spill::from_slice(&by_pos)?
    };
    drop(vertex);
    let shallow = {
        let all = shallow.load()?;
        let mut r = object.reader();
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(all[r.next_value()? as usize]);
        }
        out
    };
    let class = if classes <= 1 << 16 {
        let all = class_of.load_as(|c| c as u16)?;
        let mut r = object.reader();
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(all[r.next_value()? as usize]);
        }
        Column::Narrow(out)
    } else {
        let all = class_of.load()?;
        let mut r = object.reader();
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(all[r.next_value()? as usize]);
        }
        Column::Wide(out)
    };
    let mut blocks = Vec::with_capacity(len / BLOCK + 1);
    let mut sum = 0u64;
    for (t, &s) in shallow.iter().enumerate() {
        if t % BLOCK == 0 {
            blocks.push(sum);
        }
        sum += u64::from(s);
    }
    if len % BLOCK == 0 {
        blocks.push(sum);
    }
    Ok(DomTree {
        size,
        shallow,
        blocks,
        class,
        object,
    })
}

/// The vertex of least semidominator on `v`'s path in the linked forest, while `w` is being
/// processed: the nodes after `w` are linked, `ancestor` holds their forest parents (the DFS
/// parents, compressed) and the DFS parents of the others.
fn eval(
    v: u32,
    w: u32,
    ancestor: &mut [u32],
    label: &mut [u32],
    semi: &[u32],
    path: &mut Vec<u32>,
) -> u32 {
    if v <= w {
        return v;
    }
    // Compress: collect the path up to the tree root's child, then fold from the top.
    path.clear();
    let mut x = v;
    while ancestor[x as usize] > w {
        path.push(x);
        x = ancestor[x as usize];
    }
    while let Some(y) = path.pop() {
        let a = ancestor[y as usize] as usize;
        if semi[label[a] as usize] < semi[label[y as usize] as usize] {
            label[y as usize] = label[a];
        }
        ancestor[y as usize] = ancestor[a];
    }
    label[v as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Per object: the immediate dominator ([`TOP`], or [`NONE`] when unreachable) and the
    /// retained bytes, read back from the tree (whose other columns are checked on the way).
    struct ByObject {
        idom: Vec<u32>,
        retained: Vec<u64>,
    }

    fn compute_csr(starts: &[u32], edges: &[u32], roots: &[u32], shallow: &[u32]) -> ByObject {
        by_object(starts, edges, roots, shallow, 3)
    }

    fn by_object(
        starts: &[u32],
        edges: &[u32],
        roots: &[u32],
        shallow: &[u32],
        classes: u32,
    ) -> ByObject {
        let n = shallow.len();
        let class_of: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(7919) % classes)
            .collect();
        let graph = Graph {
            starts: starts.to_vec(),
            edges: edges.to_vec(),
        };
        let tree = compute(
            graph,
            roots,
            &Spill::from_slice(shallow).unwrap(),
            &Spill::from_slice(&class_of).unwrap(),
            classes as usize,
        )
        .unwrap();
        let mut idom = vec![NONE; n];
        let mut retained = vec![0u64; n];
        let mut open: Vec<(u32, u32)> = Vec::new();
        for t in 0..tree.len() as u32 {
            while open.last().is_some_and(|&(end, _)| end <= t) {
                open.pop();
            }
            let o = tree.object(t).unwrap();
            idom[o as usize] = open.last().map_or(TOP, |&(_, d)| d);
            retained[o as usize] = tree.retained(t);
            assert_eq!(tree.shallow(t), shallow[o as usize]);
            assert_eq!(tree.class(t), class_of[o as usize]);
            let kids: u32 = tree.children(t).map(|k| tree.size(k)).sum();
            assert_eq!(kids + 1, tree.size(t));
            open.push((tree.end(t), o));
        }
        let top: u32 = tree.top().map(|t| tree.size(t)).sum();
        assert_eq!(top as usize, tree.len());
        assert_eq!(
            tree.total(),
            (0..tree.len() as u32)
                .map(|t| u64::from(tree.shallow(t)))
                .sum::<u64>()
        );
        ByObject { idom, retained }
    }

    fn csr(n: usize, edges: &[(u32, u32)]) -> (Vec<u32>, Vec<u32>) {
        let mut starts = vec![0u32; n + 1];
        let mut sorted = edges.to_vec();
        sorted.sort_unstable();
        for &(a, _) in &sorted {
            starts[a as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        (starts, sorted.iter().map(|e| e.1).collect())
    }

    /// Objects reachable from the roots when `removed` is taken out of the graph.
    fn reachable(n: usize, edges: &[(u32, u32)], roots: &[u32], removed: Option<u32>) -> Vec<bool> {
        let mut seen = vec![false; n];
        let mut stack: Vec<u32> = roots
            .iter()
            .copied()
            .filter(|&r| Some(r) != removed)
            .collect();
        while let Some(v) = stack.pop() {
            if seen[v as usize] {
                continue;
            }
            seen[v as usize] = true;
            for &(a, b) in edges {
                if a == v && Some(b) != removed && !seen[b as usize] {
                    stack.push(b);
                }
            }
        }
        seen
    }

    /// Dominators by their definition: d dominates v when v is unreachable without d.
    fn naive(
        n: usize,
        edges: &[(u32, u32)],
        roots: &[u32],
        shallow: &[u32],
    ) -> (Vec<u32>, Vec<u64>) {
        let all = reachable(n, edges, roots, None);
        let without: Vec<Vec<bool>> = (0..n as u32)
            .map(|d| reachable(n, edges, roots, Some(d)))
            .collect();
        let strict =
            |v: usize| -> Vec<usize> { (0..n).filter(|&d| d != v && !without[d][v]).collect() };
        let mut idom = vec![NONE; n];
        let mut retained = vec![0u64; n];
        for v in 0..n {
            if !all[v] {
                continue;
            }
            let doms = strict(v);
            idom[v] = doms
                .iter()
                .copied()
                .find(|&d| strict(d).len() + 1 == doms.len())
                .map_or(TOP, |d| d as u32);
            retained[v] = (0..n)
                .filter(|&o| all[o] && (o == v || !without[v][o]))
                .map(|o| u64::from(shallow[o]))
                .sum();
        }
        (idom, retained)
    }

    #[test]
    fn the_textbook_example() {
        // Lengauer and Tarjan's figure: R=0 with a cross-connected graph.
        let edges = [
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 4),
            (2, 1),
            (2, 4),
            (2, 5),
            (3, 6),
            (3, 7),
            (4, 12),
            (5, 8),
            (6, 9),
            (7, 9),
            (7, 10),
            (8, 5),
            (8, 11),
            (9, 11),
            (10, 9),
            (11, 0),
            (11, 9),
            (12, 8),
        ];
        let n = 13;
        let (starts, e) = csr(n, &edges);
        let shallow: Vec<u32> = (0..n as u32).map(|i| 10 + i).collect();
        let d = compute_csr(&starts, &e, &[0], &shallow);
        let (idom, retained) = naive(n, &edges, &[0], &shallow);
        assert_eq!(d.idom, idom);
        assert_eq!(d.retained, retained);
        assert_eq!(d.idom[0], TOP);
        assert_eq!(
            d.retained[0],
            shallow.iter().map(|&s| u64::from(s)).sum::<u64>()
        );
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 1_000_000u32;
        let edges: Vec<(u32, u32)> = (0..n - 1).map(|i| (i, i + 1)).chain([(n - 1, 0)]).collect();
        let (starts, e) = csr(n as usize, &edges);
        let d = compute_csr(&starts, &e, &[0], &vec![8; n as usize]);
        assert_eq!(d.retained[0], 8 * u64::from(n));
        assert_eq!(d.idom[n as usize - 1], n - 2);
    }

    #[test]
    fn many_classes_keep_their_indices() {
        let edges: Vec<(u32, u32)> = (0..99u32)
            .map(|i| (i, i + 1))
            .chain([(5, 50), (60, 7)])
            .collect();
        let (starts, e) = csr(100, &edges);
        let shallow: Vec<u32> = (0..100u32).map(|i| 16 + 8 * (i % 3)).collect();
        let d = by_object(&starts, &e, &[0], &shallow, 70_000);
        let (idom, retained) = naive(100, &edges, &[0], &shallow);
        assert_eq!(d.idom, idom);
        assert_eq!(d.retained, retained);
    }

    proptest! {
        #[test]
        fn semi_nca_agrees_with_the_definition(
            n in 1usize..24,
            raw in proptest::collection::vec((0u32..24, 0u32..24), 0..60),
            roots in proptest::collection::vec(0u32..24, 1..4),
        ) {
            let edges: Vec<(u32, u32)> = raw.into_iter().filter(|&(a, b)| (a as usize) < n && (b as usize) < n).collect();
            let roots: Vec<u32> = roots.into_iter().filter(|&r| (r as usize) < n).collect();
            let shallow: Vec<u32> = (0..n as u32).map(|i| 16 + 8 * (i % 5)).collect();
            let (starts, e) = csr(n, &edges);
            let d = compute_csr(&starts, &e, &roots, &shallow);
            let (idom, retained) = naive(n, &edges, &roots, &shallow);
            prop_assert_eq!(d.idom, idom);
            prop_assert_eq!(d.retained, retained);
        }
    }
}
