//! Dominators and retained sizes, by the semi-NCA algorithm (Georgiadis and Tarjan's simple
//! variant of Lengauer–Tarjan: semidominators by path-compressed evaluation over a DFS tree,
//! then each immediate dominator as the nearest common ancestor of parent and semidominator).
//!
//! The graph is the heap's CSR successor lists plus one virtual root whose successors are the
//! GC roots. Everything runs in DFS-number space on flat `u32` arrays, iteratively (object
//! graphs are deep: a linked list of a million nodes is a million-deep DFS).

use crate::graph::{Heap, NONE};

/// The virtual root's place in [`Dominators::idom`]: the object is dominated by the GC roots
/// as a whole (a top-level dominator).
pub const TOP: u32 = u32::MAX - 1;

pub struct Dominators {
    /// Per object: its immediate dominator, [`TOP`], or [`NONE`] when unreachable.
    pub idom: Vec<u32>,
    /// Per object: retained bytes (its own and all it dominates); 0 when unreachable.
    pub retained: Vec<u64>,
    /// How many objects are reachable from the roots.
    pub reachable_count: u64,
}

impl Dominators {
    pub fn reachable(&self, i: u32) -> bool {
        self.idom[i as usize] != NONE
    }

    /// Children of every object in the dominator tree, CSR form over object indices, plus the
    /// top-level dominators.
    pub fn children(&self) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
        let n = self.idom.len();
        let mut starts = vec![0u32; n + 1];
        let mut top = Vec::new();
        for &d in &self.idom {
            if d != NONE && d != TOP {
                starts[d as usize] += 1;
            }
        }
        // Running sums make starts[i] the end of i's children; placing each child at
        // --starts[d] leaves starts[i] at their beginning.
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut kids = vec![0u32; starts[n] as usize];
        for (i, &d) in self.idom.iter().enumerate().rev() {
            if d == TOP {
                top.push(i as u32);
            } else if d != NONE {
                starts[d as usize] -= 1;
                kids[starts[d as usize] as usize] = i as u32;
            }
        }
        top.reverse();
        (starts, kids, top)
    }
}

/// Computes dominators and retained sizes of every object reachable from the heap's roots.
pub fn compute(heap: &Heap) -> Dominators {
    let roots: Vec<u32> = heap.roots.iter().map(|r| r.0).collect();
    compute_csr(&heap.starts, &heap.edges, &roots, &heap.shallow)
}

/// The same over any graph in CSR form: the successors of `i` are
/// `edges[starts[i]..starts[i + 1]]`, `shallow[i]` its own size.
pub fn compute_csr(starts: &[u32], edges: &[u32], roots: &[u32], shallow: &[u32]) -> Dominators {
    let n = shallow.len();
    let successors = |i: u32| &edges[starts[i as usize] as usize..starts[i as usize + 1] as usize];
    let mut roots = roots.to_vec();
    roots.sort_unstable();
    roots.dedup();

    // 1. DFS from the virtual root (DFS number 0): preorder numbers, tree parents.
    let mut dfn = vec![NONE; n];
    let mut vertex: Vec<u32> = vec![NONE];
    let mut parent: Vec<u32> = vec![NONE];
    {
        let mut stack: Vec<(u32, u32)> = Vec::new();
        for &r in &roots {
            if dfn[r as usize] != NONE {
                continue;
            }
            dfn[r as usize] = vertex.len() as u32;
            vertex.push(r);
            parent.push(0);
            stack.push((r, 0));
            while let Some(top) = stack.last_mut() {
                let (v, k) = *top;
                let succ = successors(v);
                if (k as usize) < succ.len() {
                    top.1 += 1;
                    let w = succ[k as usize];
                    if dfn[w as usize] == NONE {
                        dfn[w as usize] = vertex.len() as u32;
                        vertex.push(w);
                        parent.push(dfn[v as usize]);
                        stack.push((w, 0));
                    }
                } else {
                    stack.pop();
                }
            }
        }
    }
    let count = vertex.len();

    // 2. Predecessors in DFS-number space (the virtual root precedes every GC root), kept only
    //    for nodes with two or more: a node with one predecessor was reached from it, so its
    //    semidominator is its DFS parent (and so is its immediate dominator). On heaps most
    //    objects have one referrer.
    let mut pstart = vec![0u32; count + 1];
    for &r in &roots {
        pstart[dfn[r as usize] as usize + 1] += 1;
    }
    for &v in &vertex[1..] {
        for &w in successors(v) {
            pstart[dfn[w as usize] as usize + 1] += 1;
        }
    }
    for c in pstart.iter_mut() {
        if *c == 1 {
            *c = 0;
        }
    }
    for i in 0..count {
        pstart[i + 1] += pstart[i];
    }
    let mut preds = vec![0u32; pstart[count] as usize];
    {
        let stored = |w: usize| pstart[w + 1] > pstart[w];
        let mut fill = pstart.clone();
        for &r in &roots {
            let w = dfn[r as usize] as usize;
            if stored(w) {
                preds[fill[w] as usize] = 0;
                fill[w] += 1;
            }
        }
        for (d, &v) in vertex.iter().enumerate().skip(1) {
            for &w in successors(v) {
                let w = dfn[w as usize] as usize;
                if stored(w) {
                    preds[fill[w] as usize] = d as u32;
                    fill[w] += 1;
                }
            }
        }
    }
    drop(dfn);

    // 3. Semidominators, in reverse preorder, with path-compressed evaluation.
    let mut semi: Vec<u32> = (0..count as u32).collect();
    let mut label: Vec<u32> = (0..count as u32).collect();
    let mut ancestor = vec![NONE; count];
    let mut path = Vec::new();
    for w in (1..count).rev() {
        let stored = &preds[pstart[w] as usize..pstart[w + 1] as usize];
        if stored.is_empty() {
            semi[w] = parent[w];
        }
        for &v in stored {
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            if semi[u as usize] < semi[w] {
                semi[w] = semi[u as usize];
            }
        }
        ancestor[w] = parent[w];
    }
    drop((label, ancestor, preds, pstart));

    // 4. Immediate dominators: walk up from the parent until below the semidominator.
    let mut idom = parent;
    for w in 1..count {
        let mut d = idom[w];
        while d > semi[w] {
            d = idom[d as usize];
        }
        idom[w] = d;
    }
    drop(semi);

    // 5. Into object space; then retained sizes, each object before its dominator (reverse
    //    preorder).
    let mut by_object = Dominators {
        idom: vec![NONE; n],
        retained: Vec::new(),
        reachable_count: count as u64 - 1,
    };
    for w in 1..count {
        by_object.idom[vertex[w] as usize] = if idom[w] == 0 {
            TOP
        } else {
            vertex[idom[w] as usize]
        };
    }
    drop(idom);
    let mut retained = vec![0u64; n];
    for &o in &vertex[1..] {
        retained[o as usize] = u64::from(shallow[o as usize]);
    }
    for &o in vertex[1..].iter().rev() {
        let d = by_object.idom[o as usize];
        if d != TOP {
            retained[d as usize] += retained[o as usize];
        }
    }
    by_object.retained = retained;
    by_object
}

/// The vertex of least semidominator on `v`'s path in the linked forest.
fn eval(v: u32, ancestor: &mut [u32], label: &mut [u32], semi: &[u32], path: &mut Vec<u32>) -> u32 {
    if ancestor[v as usize] == NONE {
        return v;
    }
    // Compress: collect the path up to the tree root's child, then fold from the top.
    path.clear();
    let mut x = v;
    while ancestor[ancestor[x as usize] as usize] != NONE {
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
