//! From a loaded heap and its dominators to the report: the class histogram with retained sizes,
//! the top retainers with the GC root that holds each and the shortest path to it, the leak
//! suspects, and the top of the dominator tree for the HTML view.

use crate::dominators::{self, DomTree, TOP};
use crate::graph::{ClassKind, Graph, Heap, NONE, RootKind};
use crate::reader::{Object, ty};
use crate::spill::Spill;
use serde::Serialize;
use std::collections::VecDeque;

/// What the report holds; serialized as the `--format json` output.
#[derive(Clone, Debug, Serialize)]
pub struct HeapReport {
    /// Objects in the dump (reachable or not).
    pub objects: u64,
    /// Shallow bytes of all objects in the dump.
    pub bytes: u64,
    pub reachable_objects: u64,
    pub reachable_bytes: u64,
    /// The object layout assumed for shallow sizes.
    pub layout: String,
    pub classes: Vec<ClassRow>,
    pub dominators: Vec<Retainer>,
    pub suspects: Vec<Suspect>,
    /// The dominator tree's top (nodes of at least 0.1 % of the reachable heap, bounded), for
    /// the HTML view; not part of the JSON output.
    #[serde(skip)]
    pub tree: Vec<TreeNode>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassRow {
    pub name: String,
    pub instances: u64,
    pub shallow_bytes: u64,
    /// Bytes freed if every instance of the class were gone.
    pub retained_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Retainer {
    /// The object id (its address in the dump), as hex.
    pub id: String,
    pub class: String,
    pub shallow_bytes: u64,
    pub retained_bytes: u64,
    /// The GC root that holds it, in Java terms.
    pub root: String,
    /// The shortest path from that root: the root, then each field or array slot on the way.
    pub path: Vec<String>,
    /// What its retained set is made of: the classes with the most shallow bytes in it.
    pub retained_classes: Vec<ClassShare>,
    /// Where objects of its class and of its retained set's classes were allocated, from an
    /// allocation profile of the same run (`--alloc`), heaviest first; empty without one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocated_at: Vec<AllocationSite>,
}

/// Instances and shallow bytes of one class inside a retained set.
#[derive(Clone, Debug, Serialize)]
pub struct ClassShare {
    pub class: String,
    pub instances: u64,
    pub shallow_bytes: u64,
}

/// One allocation stack of a class, from an allocation profile joined to the dump.
#[derive(Clone, Debug, Serialize)]
pub struct AllocationSite {
    /// The allocated class.
    pub class: String,
    /// Frames, root first (the allocated type is not repeated at the leaf).
    pub stack: Vec<String>,
    /// Bytes of sampled objects of this stack still alive at the end of the run (or allocated,
    /// when the profile has no live metric).
    pub bytes: u64,
    /// Which metric `bytes` is: `live_bytes` or `bytes`.
    pub metric: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Suspect {
    pub description: String,
    pub class: String,
    pub instances: u64,
    pub retained_bytes: u64,
    /// Share of the reachable heap, in percent.
    pub percent: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TreeNode {
    pub id: String,
    pub class: String,
    pub shallow: u64,
    pub retained: u64,
    /// Index of the parent node in the tree vector, or -1 at the top.
    pub parent: i64,
    /// The path from a GC root, filled for every node shown.
    pub path: Vec<String>,
}

impl HeapReport {
    /// Names the allocation stacks of each top retainer's class: `sites` maps a class name (Java
    /// form, as the report writes it) to its stacks, heaviest first.
    pub fn join_allocations(
        &mut self,
        sites: &std::collections::HashMap<String, Vec<AllocationSite>>,
        per_class: usize,
    ) {
        for d in &mut self.dominators {
            let mut classes = vec![d.class.clone()];
            // A class of the retained set counts when it is most of it: its allocation sites
            // then explain this retainer rather than the class at large.
            for c in &d.retained_classes {
                if c.shallow_bytes * 2 >= d.retained_bytes && !classes.contains(&c.class) {
                    classes.push(c.class.clone());
                }
            }
            let mut found: Vec<AllocationSite> = classes
                .iter()
                .filter_map(|c| sites.get(c))
                .flat_map(|list| list.iter().take(per_class).cloned())
                .collect();
            found.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.stack.cmp(&b.stack)));
            found.truncate(per_class);
            d.allocated_at = found;
        }
    }
}

/// Options of the analysis.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// How many top retainers (and histogram rows in text) to report.
    pub top: usize,
    /// A suspect retains at least this share of the reachable heap (percent).
    pub suspect_percent: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            top: 20,
            suspect_percent: 10.0,
        }
    }
}

/// Runs the analysis of a loaded heap (its reference graph is consumed on the way).
pub fn analyze(mut heap: Heap, options: &Options) -> crate::Result<HeapReport> {
    let Some(graph) = heap.take_graph() else {
        return Err(crate::Error::Corrupt {
            record: "the heap dump",
            offset: 0,
            detail: "its references were already analysed".into(),
        });
    };
    // Shortest paths first, while the graph is in RAM (each object's previous step is kept on
    // disk); the dominator computation then frees the graph.
    let (previous, root_of) = shortest_paths(&heap, &graph)?;
    crate::mem_note("shortest paths");
    let roots: Vec<u32> = heap.roots.iter().map(|r| r.0).collect();
    let doms = dominators::compute(
        graph,
        &roots,
        &heap.shallow,
        &heap.class_of,
        heap.classes.len(),
    )?;
    crate::mem_note(&format!("dominator tree ({} reachable)", doms.len()));
    let heap = &heap;

    let bytes: u64 = heap.class_totals.iter().map(|t| t.1).sum();
    let retained_of = class_retained(heap, &doms);
    let reachable_bytes = doms.total();
    // Classes by name: a name loaded by two loaders is one row.
    let mut rows: std::collections::BTreeMap<&str, ClassRow> = Default::default();
    for (c, class) in heap.classes.iter().enumerate() {
        let (instances, shallow) = heap.class_totals[c];
        if instances == 0 {
            continue;
        }
        let row = rows.entry(&class.name).or_insert_with(|| ClassRow {
            name: class.name.clone(),
            instances: 0,
            shallow_bytes: 0,
            retained_bytes: 0,
        });
        row.instances += instances;
        row.shallow_bytes += shallow;
        row.retained_bytes += retained_of[c];
    }
    let mut classes: Vec<ClassRow> = rows.into_values().collect();
    classes.sort_by(|a, b| {
        b.retained_bytes
            .cmp(&a.retained_bytes)
            .then(b.shallow_bytes.cmp(&a.shallow_bytes))
            .then(a.name.cmp(&b.name))
    });

    let mut paths = Paths {
        heap,
        previous,
        root_of,
        locator: heap.locator()?,
    };
    let sorted_top = sorted_top(&doms)?;
    let mut dominators = Vec::new();
    for top in sorted_top.iter().take(options.top) {
        let path = paths.path(top.object)?;
        dominators.push(Retainer {
            retained_classes: retained_classes(heap, &doms, top.node),
            id: format!("0x{:x}", paths.id(top.object)?),
            class: class_name(heap, &doms, top.node),
            shallow_bytes: u64::from(doms.shallow(top.node)),
            retained_bytes: top.retained,
            root: path.first().cloned().unwrap_or_default(),
            path,
            allocated_at: Vec::new(),
        });
    }
    let suspects = suspects(heap, &doms, &sorted_top, reachable_bytes, options);
    let tree = tree(heap, &doms, &sorted_top, reachable_bytes, &mut paths)?;
    let layout = &heap.layout;
    Ok(HeapReport {
        objects: heap.objects() as u64,
        bytes,
        reachable_objects: doms.len() as u64,
        reachable_bytes,
        layout: format!(
            "{}-byte object headers, {}-byte references ({})",
            layout.header,
            layout.reference,
            if heap.header.id_size == 4 {
                "32-bit JVM"
            } else if layout.reference == 4 {
                "compressed oops: the dump's addresses span under 32 GB"
            } else {
                "uncompressed oops"
            }
        ),
        classes,
        dominators,
        suspects,
        tree,
    })
}

fn class_name(heap: &Heap, doms: &DomTree, t: u32) -> String {
    heap.classes[doms.class(t) as usize].name.clone()
}

/// A node of the dominator tree with its object index and retained size.
struct Node {
    node: u32,
    object: u32,
    retained: u64,
}

/// The top-level dominators, largest first (ties in the file's object order).
fn sorted_top(doms: &DomTree) -> crate::Result<Vec<Node>> {
    let mut out = Vec::new();
    let mut objects = doms.objects().reader();
    let mut at = 0u32;
    for t in doms.top() {
        while at < t {
            objects.next_value()?;
            at += 1;
        }
        out.push(Node {
            node: t,
            object: objects.next_value()?,
            retained: doms.retained(t),
        });
        at += 1;
    }
    out.sort_unstable_by_key(|n| (std::cmp::Reverse(n.retained), n.object));
    Ok(out)
}

/// The three classes with the most shallow bytes in the dominator subtree of `t`.
fn retained_classes(heap: &Heap, doms: &DomTree, t: u32) -> Vec<ClassShare> {
    let mut per_class = vec![(0u64, 0u64); heap.classes.len()];
    for v in t..doms.end(t) {
        let e = &mut per_class[doms.class(v) as usize];
        e.0 += 1;
        e.1 += u64::from(doms.shallow(v));
    }
    let mut list: Vec<(u32, (u64, u64))> = per_class
        .into_iter()
        .enumerate()
        .filter(|(_, e)| e.0 > 0)
        .map(|(c, e)| (c as u32, e))
        .collect();
    list.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(&b.0)));
    list.into_iter()
        .take(3)
        .map(|(c, (n, b))| ClassShare {
            class: heap.classes[c as usize].name.clone(),
            instances: n,
            shallow_bytes: b,
        })
        .collect()
}

/// Per class, the bytes its instances retain together: the retained size of every instance
/// that no other instance of the same class dominates. One sweep in tree order, with the open
/// ancestors on a stack and a count of open instances per class.
fn class_retained(heap: &Heap, doms: &DomTree) -> Vec<u64> {
    let mut retained = vec![0u64; heap.classes.len()];
    let mut active = vec![0u32; heap.classes.len()];
    let mut open: Vec<(u32, u32)> = Vec::new();
    for t in 0..doms.len() as u32 {
        while let Some(&(end, c)) = open.last()
            && end <= t
        {
            active[c as usize] -= 1;
            open.pop();
        }
        let c = doms.class(t);
        if active[c as usize] == 0 {
            retained[c as usize] += doms.retained(t);
        }
        active[c as usize] += 1;
        open.push((doms.end(t), c));
    }
    retained
}

fn suspects(
    heap: &Heap,
    doms: &DomTree,
    sorted_top: &[Node],
    reachable: u64,
    options: &Options,
) -> Vec<Suspect> {
    let mut out = Vec::new();
    if reachable == 0 {
        return out;
    }
    let share = |b: u64| 100.0 * b as f64 / reachable as f64;
    let threshold = options.suspect_percent;
    for top in sorted_top {
        let r = top.retained;
        if share(r) < threshold {
            break;
        }
        let class = class_name(heap, doms, top.node);
        out.push(Suspect {
            description: format!(
                "one instance of {class} retains {} ({:.1} % of the reachable heap)",
                human(r),
                share(r)
            ),
            class,
            instances: 1,
            retained_bytes: r,
            percent: share(r),
        });
    }
    // Groups: many top-level dominators of one class that together pass the threshold.
    let mut by_class: std::collections::HashMap<&str, (u64, u64)> = Default::default();
    for top in sorted_top {
        let e = by_class
            .entry(&heap.classes[doms.class(top.node) as usize].name)
            .or_default();
        e.0 += 1;
        e.1 += top.retained;
    }
    let mut groups: Vec<_> = by_class
        .into_iter()
        .filter(|(_, (n, r))| *n > 1 && share(*r) >= threshold)
        .collect();
    groups.sort_by_key(|(_, (_, r))| std::cmp::Reverse(*r));
    for (class, (n, r)) in groups {
        if out
            .iter()
            .any(|s| s.class == class && s.retained_bytes * 2 > r)
        {
            continue;
        }
        out.push(Suspect {
            description: format!(
                "{n} instances of {class}, each held on its own, retain {} ({:.1} % of the reachable heap)",
                human(r),
                share(r)
            ),
            class: class.to_string(),
            instances: n,
            retained_bytes: r,
            percent: share(r),
        });
    }
    out
}

/// The top of the dominator tree: nodes retaining at least 0.1 % of the heap, at most 30
/// children each and 2000 nodes in all.
fn tree(
    heap: &Heap,
    doms: &DomTree,
    sorted_top: &[Node],
    reachable: u64,
    paths: &mut Paths<'_>,
) -> crate::Result<Vec<TreeNode>> {
    let min = reachable / 1000;
    let mut out: Vec<TreeNode> = Vec::new();
    let mut queue: VecDeque<(u32, u32, i64)> = sorted_top
        .iter()
        .take(50)
        .filter(|top| top.retained >= min)
        .map(|top| (top.node, top.object, -1))
        .collect();
    while let Some((t, o, parent)) = queue.pop_front() {
        if out.len() >= 2000 {
            break;
        }
        let at = out.len() as i64;
        out.push(TreeNode {
            id: format!("0x{:x}", paths.id(o)?),
            class: class_name(heap, doms, t),
            shallow: u64::from(doms.shallow(t)),
            retained: doms.retained(t),
            parent,
            path: if out.len() < 300 {
                paths.path(o)?
            } else {
                Vec::new()
            },
        });
        // The largest children (ties in the file's object order); only those shown are looked up.
        let mut children = Vec::new();
        for k in doms.children(t) {
            let r = doms.retained(k);
            if r >= min && r > 0 {
                children.push(Node {
                    node: k,
                    object: doms.object(k)?,
                    retained: r,
                });
            }
        }
        children.sort_unstable_by_key(|n| (std::cmp::Reverse(n.retained), n.object));
        for k in children.into_iter().take(30) {
            queue.push_back((k.node, k.object, at));
        }
    }
    Ok(out)
}

/// Shortest paths from the GC roots (breadth-first, roots ranked so that statics and thread
/// locals name an object before the class or thread that also reaches it), and the naming of
/// each step by reading the holder back from the file.
struct Paths<'h> {
    heap: &'h Heap,
    /// Per object (on disk): the previous object on its shortest path, [`TOP`] at a root,
    /// [`NONE`] when unreachable.
    previous: Spill<u32>,
    /// Root object -> the root (index into `heap.roots`) that names it.
    root_of: std::collections::HashMap<u32, u32>,
    locator: crate::reader::Locator,
}

/// The breadth-first search behind [`Paths`]: each object's previous step, and the root that
/// names each root object.
fn shortest_paths(
    heap: &Heap,
    graph: &Graph,
) -> crate::Result<(Spill<u32>, std::collections::HashMap<u32, u32>)> {
    let mut previous = vec![NONE; heap.objects()];
    let mut root_of = std::collections::HashMap::new();
    let mut order: Vec<usize> = (0..heap.roots.len()).collect();
    order.sort_by_key(|&r| root_rank(&heap.roots[r].1));
    let mut queue = VecDeque::new();
    for r in order {
        let o = heap.roots[r].0;
        if previous[o as usize] == NONE {
            root_of.insert(o, r as u32);
            previous[o as usize] = TOP;
            queue.push_back(o);
        }
    }
    while let Some(v) = queue.pop_front() {
        for &w in graph.successors(v) {
            if previous[w as usize] == NONE {
                previous[w as usize] = v;
                queue.push_back(w);
            }
        }
    }
    drop(queue);
    Ok((Spill::from_slice(&previous)?, root_of))
}

impl<'h> Paths<'h> {
    fn id(&mut self, i: u32) -> crate::Result<u64> {
        Ok(self.locator.object(i as usize)?.0)
    }

    /// Root label first, then one step per reference on the way to `i`.
    fn path(&mut self, i: u32) -> crate::Result<Vec<String>> {
        let mut chain = vec![i];
        let mut v = i;
        loop {
            let p = self.previous.get(v as usize)?;
            if p == TOP || p == NONE {
                break;
            }
            v = p;
            chain.push(v);
            if chain.len() > 10_000 {
                break;
            }
        }
        chain.reverse();
        let mut out = vec![match self.root_of.get(&chain[0]) {
            Some(&r) => self.root_label(r as usize)?,
            None => "unreachable".to_string(),
        }];
        for pair in chain.windows(2) {
            let to_id = self.id(pair[1])?;
            out.push(self.step(pair[0], to_id)?);
        }
        Ok(out)
    }

    /// How `from` holds the object `to_id`: `Class.field` or `Type[][index]`.
    fn step(&mut self, from: u32, to_id: u64) -> crate::Result<String> {
        let heap = self.heap;
        let (_, object) = self.locator.object(from as usize)?;
        let id_size = heap.header.id_size as usize;
        Ok(match object {
            Object::Instance { class_id, fields } => {
                let holder = heap.class_by_id(class_id).unwrap_or(NONE);
                let mut c = holder;
                let mut at = 0usize;
                while c != NONE {
                    let class = &heap.classes[c as usize];
                    for (name, t) in &class.fields {
                        let size = crate::reader::value_size(*t, heap.header.id_size).unwrap_or(0)
                            as usize;
                        if *t == ty::OBJECT && read_id(&fields, at, id_size) == to_id {
                            return Ok(format!("{}.{}", class.name, name));
                        }
                        at += size;
                    }
                    c = heap.class_by_id(class.super_id).unwrap_or(NONE);
                }
                format!("{}.?", class_name_of(heap, holder))
            }
            Object::ObjectArray { class_id, elements } => {
                let name = class_name_of(heap, heap.class_by_id(class_id).unwrap_or(NONE));
                let k = (0..elements.len() / id_size)
                    .find(|&k| read_id(&elements, k * id_size, id_size) == to_id);
                match k {
                    Some(k) => format!("{name}[{k}]"),
                    None => format!("{name}[?]"),
                }
            }
            Object::Class(c) => {
                let name = heap
                    .class_named_by_object(from)
                    .unwrap_or_else(|| "?".into());
                if c.super_id == to_id {
                    format!("{name} (superclass)")
                } else if c.loader_id == to_id {
                    format!("{name} (class loader)")
                } else {
                    let s = heap
                        .class_index_of_object(from)
                        .and_then(|ci| {
                            heap.classes[ci as usize]
                                .statics
                                .iter()
                                .find(|s| s.1 == ty::OBJECT && s.2 == to_id)
                                .map(|s| s.0.clone())
                        })
                        .unwrap_or_else(|| "?".into());
                    format!("static {name}.{s}")
                }
            }
            Object::PrimitiveArray { .. } => "?".into(),
        })
    }

    fn root_label(&mut self, r: usize) -> crate::Result<String> {
        let heap = self.heap;
        let (o, kind) = &heap.roots[r];
        Ok(match kind {
            RootKind::Static(c, name) => {
                format!("static {}.{}", heap.classes[*c as usize].name, name)
            }
            RootKind::JavaLocal { thread, depth } => {
                let t = self.thread_name(*thread)?;
                match self.frame_of(*thread, *depth) {
                    Some(m) => format!("thread {t} local in {m}"),
                    None => format!("thread {t} local"),
                }
            }
            RootKind::JniLocal { thread } => {
                format!("JNI local in thread {}", self.thread_name(*thread)?)
            }
            RootKind::NativeStack { thread } => {
                format!("native stack of thread {}", self.thread_name(*thread)?)
            }
            RootKind::ThreadBlock { thread } => {
                format!("thread block of {}", self.thread_name(*thread)?)
            }
            RootKind::Thread { thread } => format!("thread {}", self.thread_name(*thread)?),
            RootKind::JniGlobal => "JNI global".into(),
            RootKind::SystemClass => format!(
                "system class {}",
                heap.class_named_by_object(*o).unwrap_or_else(|| "?".into())
            ),
            RootKind::Class => format!(
                "class {}",
                heap.class_named_by_object(*o).unwrap_or_else(|| "?".into())
            ),
            RootKind::BusyMonitor => "busy monitor".into(),
            RootKind::Unknown => "unknown root".into(),
        })
    }

    /// `Foo.run` for the frame at `depth` of a thread's stack.
    fn frame_of(&self, thread: u32, depth: u32) -> Option<String> {
        let (_, trace) = self.heap.threads.get(&thread)?;
        let frames = self.heap.traces.get(trace)?;
        let (class, method, _) = self.heap.frames.get(frames.get(depth as usize)?)?;
        Some(format!("{class}.{method}"))
    }

    /// `"worker-1"` (quoted), or `#serial` when the name cannot be read.
    fn thread_name(&mut self, thread: u32) -> crate::Result<String> {
        let Some(&(o, _)) = self.heap.threads.get(&thread) else {
            return Ok(format!("#{thread}"));
        };
        let name = match self.field(o, "name")? {
            Some(s) => match self.heap.index_of(s)? {
                Some(s) => self.string(s)?,
                None => None,
            },
            None => None,
        };
        Ok(match name {
            Some(n) => format!("{n:?}"),
            None => format!("#{thread}"),
        })
    }

    /// The value of the reference field `name` of instance `i` (searched up the class chain).
    fn field(&mut self, i: u32, name: &str) -> crate::Result<Option<u64>> {
        let heap = self.heap;
        let (_, Object::Instance { class_id, fields }) = self.locator.object(i as usize)? else {
            return Ok(None);
        };
        let c = heap.class_by_id(class_id).unwrap_or(NONE);
        Ok(field_value(heap, c, &fields, name).map(|(_, v)| v))
    }

    /// The text of a `java.lang.String` (compact Latin-1/UTF-16 `byte[]` or `char[]`).
    fn string(&mut self, i: u32) -> crate::Result<Option<String>> {
        let heap = self.heap;
        let (_, Object::Instance { class_id, fields }) = self.locator.object(i as usize)? else {
            return Ok(None);
        };
        let c = heap.class_by_id(class_id).unwrap_or(NONE);
        let Some((_, value)) = field_value(heap, c, &fields, "value") else {
            return Ok(None);
        };
        let coder = field_value(heap, c, &fields, "coder").map_or(0, |(_, v)| v);
        let Some(v) = heap.index_of(value)? else {
            return Ok(None);
        };
        let (_, Object::PrimitiveArray { ty: t, data, .. }) = self.locator.object(v as usize)?
        else {
            return Ok(None);
        };
        Ok(Some(match t {
            ty::CHAR => {
                let units: Vec<u16> = data
                    .chunks_exact(2)
                    .map(|b| u16::from_be_bytes([b[0], b[1]]))
                    .collect();
                String::from_utf16_lossy(&units)
            }
            ty::BYTE if coder == 0 => data.iter().map(|&b| char::from(b)).collect(),
            ty::BYTE => {
                let units: Vec<u16> = data
                    .chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect();
                String::from_utf16_lossy(&units)
            }
            _ => return Ok(None),
        }))
    }
}

/// Ranks roots for naming: statics and locals name what they hold before broader roots.
fn root_rank(kind: &RootKind) -> u8 {
    match kind {
        RootKind::Static(..) => 0,
        RootKind::JavaLocal { .. } | RootKind::JniLocal { .. } | RootKind::NativeStack { .. } => 1,
        RootKind::JniGlobal => 2,
        RootKind::Thread { .. } | RootKind::ThreadBlock { .. } => 3,
        RootKind::BusyMonitor => 4,
        RootKind::SystemClass | RootKind::Class => 5,
        RootKind::Unknown => 6,
    }
}

fn read_id(bytes: &[u8], at: usize, size: usize) -> u64 {
    match bytes.get(at..at + size) {
        Some(b) if size == 4 => u64::from(u32::from_be_bytes(b.try_into().expect("4"))),
        Some(b) => u64::from_be_bytes(b.try_into().expect("8")),
        None => 0,
    }
}

/// (basic type, raw value) of field `name` in an instance's field bytes.
fn field_value(heap: &Heap, class: u32, fields: &[u8], name: &str) -> Option<(u8, u64)> {
    let size = heap.header.id_size;
    let mut c = class;
    let mut at = 0usize;
    let mut guard = 0;
    while c != NONE && guard < 1000 {
        guard += 1;
        let k = &heap.classes[c as usize];
        if k.kind != ClassKind::Instance {
            return None;
        }
        for (n, t) in &k.fields {
            let s = crate::reader::value_size(*t, size)? as usize;
            if n == name {
                let b = fields.get(at..at + s)?;
                let mut v = 0u64;
                for &x in b {
                    v = v << 8 | u64::from(x);
                }
                return Some((*t, v));
            }
            at += s;
        }
        c = heap.class_by_id(k.super_id).unwrap_or(NONE);
    }
    None
}

/// `1.5 MB`-style sizes for messages.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// The name of class-table entry `c`, or `?`.
fn class_name_of(heap: &Heap, c: u32) -> String {
    heap.classes
        .get(c as usize)
        .map_or_else(|| "?".into(), |c| c.name.clone())
}
