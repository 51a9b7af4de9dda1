//! The object graph of a dump in compact arrays, built in two passes over the file.
//!
//! Pass 1 reads names, classes, roots and every object's id, class and size; objects are
//! numbered in file order (their dense index) and the ids are sorted once for lookups. Pass 2
//! reads the references of each object (instance fields by the class layouts, array elements,
//! class statics) and stores them as dense indices in one CSR array. Only the graph stays in
//! RAM: per-object columns (id, class, shallow size) go to temporary files ([`crate::spill`])
//! as they are read, so that the peak is set by the references, not by everything. Shallow sizes follow
//! HotSpot's layout: a 12-byte header and 4-byte references with compressed oops (assumed when
//! the ids, which are addresses, span under 32 GB), 16/8 without, 8/4 on a 32-bit JVM; arrays
//! add a 4-byte length; every object is rounded up to 8 bytes.

use crate::error::{Error, Result};
use crate::ids::{IdIndex, SpilledIds};
use crate::reader::{self, CHECKPOINT, ClassDump, FrameRecord, Header, Root, Segment, Visitor, ty};
use crate::spill::{Spill, SpillReader, SpillWriter};
use std::collections::HashMap;
use std::path::Path;

/// No object / no class.
pub const NONE: u32 = u32::MAX;

/// What an entry of the class table stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassKind {
    Instance,
    ObjectArray,
    /// A primitive array of this basic type.
    PrimitiveArray(u8),
}

/// One class of the dump (or a primitive array type, which has no class dump).
#[derive(Clone, Debug)]
pub struct Class {
    pub id: u64,
    /// Java source form: `java.util.HashMap`, `byte[]`, `Outer$Inner`.
    pub name: String,
    pub kind: ClassKind,
    pub super_id: u64,
    pub loader_id: u64,
    /// Own instance fields (name, basic type), in dump order.
    pub fields: Vec<(String, u8)>,
    /// Statics (name, basic type, value).
    pub statics: Vec<(String, u8, u64)>,
    /// Whether a CLASS DUMP was seen.
    pub dumped: bool,
    /// Shallow size of an instance (computed after pass 1).
    pub instance_size: u32,
    /// Byte offsets of reference fields in an instance's field bytes, supers included.
    pub ref_offsets: Vec<u32>,
    /// Dense index of the class object, or [`NONE`].
    pub object: u32,
}

impl Class {
    /// A class not yet described by a CLASS DUMP.
    fn new(id: u64, name: String, kind: ClassKind) -> Class {
        Class {
            id,
            name,
            kind,
            super_id: 0,
            loader_id: 0,
            fields: Vec::new(),
            statics: Vec::new(),
            dumped: false,
            instance_size: 0,
            ref_offsets: Vec::new(),
            object: NONE,
        }
    }
}

/// Where a GC root is, in Java terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootKind {
    /// A static field: class index and field name.
    Static(u32, String),
    /// A local variable or operand of a Java frame: thread serial and frame depth.
    JavaLocal {
        thread: u32,
        depth: u32,
    },
    JniLocal {
        thread: u32,
    },
    NativeStack {
        thread: u32,
    },
    ThreadBlock {
        thread: u32,
    },
    /// A live thread's `java.lang.Thread` object.
    Thread {
        thread: u32,
    },
    JniGlobal,
    SystemClass,
    /// Any other loaded class (its statics are roots of their own).
    Class,
    BusyMonitor,
    Unknown,
}

/// Object-size conventions of the dumped JVM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub header: u32,
    pub array_header: u32,
    pub reference: u32,
}

impl Layout {
    fn align(n: u64) -> u32 {
        u32::try_from(n.div_ceil(8) * 8).unwrap_or(u32::MAX)
    }

    fn value(&self, t: u8) -> u32 {
        if t == ty::OBJECT {
            self.reference
        } else {
            reader::value_size(t, 8).unwrap_or(0)
        }
    }

    pub fn array(&self, element: u32, n: u32) -> u32 {
        Self::align(u64::from(self.array_header) + u64::from(element) * u64::from(n))
    }
}

/// The references of every object in CSR form: those of object `i` are
/// `edges[starts[i]..starts[i + 1]]`, as dense indices.
pub struct Graph {
    pub starts: Vec<u32>,
    pub edges: Vec<u32>,
}

impl Graph {
    pub fn successors(&self, i: u32) -> &[u32] {
        &self.edges[self.starts[i as usize] as usize..self.starts[i as usize + 1] as usize]
    }
}

/// The heap: classes, objects, references and roots. Per-object columns are on disk (see
/// [`crate::spill`]); the reference graph is in RAM until the analysis takes it.
pub struct Heap {
    pub header: Header,
    pub layout: Layout,
    pub classes: Vec<Class>,
    objects: usize,
    /// Per object (dense index): its class-table index.
    pub class_of: Spill<u32>,
    /// Per object: shallow size in bytes.
    pub shallow: Spill<u32>,
    /// Per class-table entry: (instances, shallow bytes).
    pub class_totals: Vec<(u64, u64)>,
    graph: Option<Graph>,
    /// GC roots: object and where it is held (an object may be several roots).
    pub roots: Vec<(u32, RootKind)>,
    /// Thread serial -> (thread object index, stack trace serial).
    pub threads: HashMap<u32, (u32, u32)>,
    /// Stack trace serial -> frame ids.
    pub traces: HashMap<u32, Vec<u64>>,
    /// Frame id -> (class name, method name, line).
    pub frames: HashMap<u64, (String, String, i32)>,
    /// References to ids that are not in the dump.
    pub dangling: u64,
    /// Class id -> class-table index.
    class_index: HashMap<u64, u32>,
    /// Dense index of a class object -> class-table index.
    class_by_object: HashMap<u32, u32>,
    ids: SpilledIds,
    segments: Vec<Segment>,
    checkpoints: Vec<u64>,
    path: std::path::PathBuf,
}

impl Heap {
    pub fn objects(&self) -> usize {
        self.objects
    }

    /// Dense index of the object with this id (a few reads of a temporary file).
    pub fn index_of(&self, id: u64) -> Result<Option<u32>> {
        self.ids.get(id)
    }

    /// The reference graph, once: the analysis frees it as soon as it is done with it.
    pub fn take_graph(&mut self) -> Option<Graph> {
        self.graph.take()
    }

    /// The class-table index of the class with this id.
    pub fn class_by_id(&self, id: u64) -> Option<u32> {
        self.class_index.get(&id).copied()
    }

    /// The class-table index of the class whose class object is `o`.
    pub fn class_index_of_object(&self, o: u32) -> Option<u32> {
        self.class_by_object.get(&o).copied()
    }

    /// The name of the class whose class object is `o`.
    pub fn class_named_by_object(&self, o: u32) -> Option<String> {
        self.class_index_of_object(o)
            .map(|c| self.classes[c as usize].name.clone())
    }

    /// Random access to objects by dense index.
    pub fn locator(&self) -> Result<reader::Locator> {
        reader::Locator::open(
            &self.path,
            &self.header,
            self.segments.clone(),
            self.checkpoints.clone(),
        )
    }
}

/// Progress callback: (pass name, bytes done, bytes total).
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// Reads the dump at `path` into a [`Heap`].
pub fn load(path: &Path, progress: Progress<'_>) -> Result<Heap> {
    let header = reader::read_header(path)?;
    crate::mem_note("start");
    let mut p1 = Pass1 {
        header: &header,
        strings: HashMap::new(),
        class_names: HashMap::new(),
        class_serials: HashMap::new(),
        frames: Vec::new(),
        traces: HashMap::new(),
        roots: Vec::new(),
        classes: Vec::new(),
        class_index: HashMap::new(),
        ids: SpillWriter::new()?,
        class_of: SpillWriter::new()?,
        counts: SpillWriter::new()?,
        id_range: (u64::MAX, 0),
        error: None,
        checkpoints: Vec::new(),
        primitive_classes: [NONE; 12],
        progress,
    };
    let segments = reader::scan(path, &header, &mut p1)?;
    let Pass1 {
        strings,
        class_names,
        class_serials,
        frames,
        traces,
        roots,
        mut classes,
        class_index,
        ids,
        class_of,
        counts,
        id_range,
        error,
        checkpoints,
        progress,
        ..
    } = p1;
    if let Some(e) = error {
        return Err(e);
    }
    let (ids, class_of, counts) = (ids.finish()?, class_of.finish()?, counts.finish()?);
    let objects = ids.len();
    crate::mem_note(&format!("pass 1 ({objects} objects)"));

    // Names, then sizes, then the id index.
    let name = |id: u64| strings.get(&id).cloned().unwrap_or_default();
    for c in &mut classes {
        if c.kind == ClassKind::Instance || c.kind == ClassKind::ObjectArray {
            c.name = class_names
                .get(&c.id)
                .map(|n| java_name(n))
                .unwrap_or_else(|| format!("<class 0x{:x}>", c.id));
        }
    }
    // Class objects were entered under a placeholder class; point them at java.lang.Class.
    let placeholder = class_index.get(&u64::MAX).copied();
    let mut java_lang_class = None;
    if let Some(placeholder) = placeholder {
        let real = classes
            .iter()
            .position(|c| c.id != u64::MAX && c.dumped && c.name == "java.lang.Class");
        match real {
            Some(r) => java_lang_class = Some(r as u32),
            None => classes[placeholder as usize].name = "java.lang.Class".into(),
        }
    }
    let layout = guess_layout(&header, objects, id_range);
    let index = IdIndex::build(&ids)?;
    drop(ids);
    let ids = index.map_err(|id| Error::Corrupt {
        record: "the heap dump",
        offset: 0,
        detail: format!("two objects have the id 0x{id:x}"),
    })?;
    crate::mem_note("id index");
    let class_index_of = |id: u64| class_index.get(&id).copied();
    finish_classes(&mut classes, &header, &layout, &ids, &class_index_of);
    let class_by_object: HashMap<u32, u32> = classes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.object != NONE)
        .map(|(i, c)| (c.object, i as u32))
        .collect();

    // Shallow sizes and the histogram, in one stream over the objects' classes and counts.
    // Class objects: the size of a java.lang.Class instance plus their statics.
    let class_size = classes
        .iter()
        .find(|c| c.name == "java.lang.Class" && c.kind == ClassKind::Instance)
        .map_or(layout.header, |c| c.instance_size);
    let mut class_totals = vec![(0u64, 0u64); classes.len()];
    let mut class_out = SpillWriter::new()?;
    let mut shallow_out = SpillWriter::new()?;
    {
        let (mut cr, mut nr) = (class_of.reader(), counts.reader());
        for i in 0..objects {
            let raw = cr.next_value()?;
            let count = nr.next_value()?;
            let c = match java_lang_class {
                Some(real) if Some(raw) == placeholder => real,
                _ => raw,
            };
            let class = &classes[c as usize];
            let mut size = match class.kind {
                ClassKind::Instance => class.instance_size,
                ClassKind::ObjectArray => layout.array(layout.reference, count),
                ClassKind::PrimitiveArray(t) => layout.array(layout.value(t), count),
            };
            if Some(raw) == placeholder
                && let Some(&ci) = class_by_object.get(&(i as u32))
            {
                let statics: u64 = classes[ci as usize]
                    .statics
                    .iter()
                    .map(|s| u64::from(layout.value(s.1)))
                    .sum();
                size = Layout::align(u64::from(class_size) + statics).max(class_size);
            }
            let t = &mut class_totals[c as usize];
            t.0 += 1;
            t.1 += u64::from(size);
            class_out.push(c)?;
            shallow_out.push(size)?;
        }
    }
    drop((class_of, counts));
    let (class_of, shallow) = (class_out.finish()?, shallow_out.finish()?);

    let mut threads = HashMap::new();
    let mut dangling = 0;
    let roots = resolve_roots(&classes, &ids, roots, &mut threads, &mut dangling);
    let mut heap_frames = HashMap::new();
    for f in frames {
        let class = class_serials
            .get(&f.class_serial)
            .and_then(|id| class_names.get(id))
            .map(|n| java_name(n))
            .unwrap_or_default();
        heap_frames.insert(f.id, (class, name(f.method_name), f.line));
    }
    crate::mem_note("before pass 2");
    let (starts, edges, pass2_dangling) =
        pass2(path, &header, &classes, &ids, &class_of, objects, progress)?;
    dangling += pass2_dangling;
    // The index goes to disk before the references come back from it.
    let ids = ids.spill()?;
    let graph = Graph {
        starts,
        edges: edges.load()?,
    };
    crate::mem_note(&format!("pass 2 ({} references)", graph.edges.len()));
    Ok(Heap {
        header,
        layout,
        classes,
        objects,
        class_of,
        shallow,
        class_totals,
        graph: Some(graph),
        roots,
        threads,
        traces,
        frames: heap_frames,
        dangling,
        class_index,
        class_by_object,
        ids,
        segments,
        checkpoints,
        path: path.to_path_buf(),
    })
}

/// `java/util/HashMap` -> `java.util.HashMap`, `[I` -> `int[]`, `[[Ljava/lang/String;` ->
/// `java.lang.String[][]`.
pub fn java_name(internal: &str) -> String {
    let dims = internal.bytes().take_while(|&b| b == b'[').count();
    if dims == 0 {
        return internal.replace('/', ".");
    }
    let element = &internal[dims..];
    let base = match element {
        "Z" => "boolean".to_string(),
        "C" => "char".to_string(),
        "F" => "float".to_string(),
        "D" => "double".to_string(),
        "B" => "byte".to_string(),
        "S" => "short".to_string(),
        "I" => "int".to_string(),
        "J" => "long".to_string(),
        e => e
            .strip_prefix('L')
            .and_then(|e| e.strip_suffix(';'))
            .unwrap_or(e)
            .replace('/', "."),
    };
    base + &"[]".repeat(dims)
}

/// Compressed oops when the dump's addresses span under 32 GB (the JVM's default below a 32 GB
/// heap); a 4-byte id size means a 32-bit JVM.
fn guess_layout(header: &Header, objects: usize, (lo, hi): (u64, u64)) -> Layout {
    if header.id_size == 4 {
        return Layout {
            header: 8,
            array_header: 12,
            reference: 4,
        };
    }
    let compressed = objects == 0 || hi - lo < (32 << 30);
    if compressed {
        Layout {
            header: 12,
            array_header: 16,
            reference: 4,
        }
    } else {
        Layout {
            header: 16,
            array_header: 20,
            reference: 8,
        }
    }
}

/// Instance sizes and reference offsets from the class chain; class objects' dense indices.
fn finish_classes(
    classes: &mut [Class],
    header: &Header,
    layout: &Layout,
    ids: &IdIndex,
    class_index_of: &dyn Fn(u64) -> Option<u32>,
) {
    let n = classes.len();
    for i in 0..n {
        if classes[i].kind != ClassKind::Instance {
            continue;
        }
        // Own fields first, then the super class's, as instance dumps lay them out.
        let mut offsets = Vec::new();
        let mut at = 0u32;
        let mut size = 0u64;
        let mut c = i as u32;
        let mut guard = 0;
        while c != NONE && guard < 1000 {
            guard += 1;
            let class = &classes[c as usize];
            for (_, t) in &class.fields {
                if *t == ty::OBJECT {
                    offsets.push(at);
                }
                at += reader::value_size(*t, header.id_size).unwrap_or(0);
                size += u64::from(layout.value(*t));
            }
            c = if class.super_id == 0 {
                NONE
            } else {
                class_index_of(class.super_id).unwrap_or(NONE)
            };
        }
        let class = &mut classes[i];
        class.ref_offsets = offsets;
        class.instance_size = Layout::align(u64::from(layout.header) + size);
    }
    for class in classes.iter_mut() {
        if class.dumped {
            class.object = ids.get(class.id).unwrap_or(NONE);
        }
    }
}

/// The GC roots as dense indices (plus every loaded class and its statics); fills the thread
/// table and counts roots whose object is missing.
fn resolve_roots(
    classes: &[Class],
    ids: &IdIndex,
    roots: Vec<(u64, Root)>,
    threads: &mut HashMap<u32, (u32, u32)>,
    dangling: &mut u64,
) -> Vec<(u32, RootKind)> {
    let mut out = Vec::new();
    for (id, root) in &roots {
        if let Root::ThreadObject { thread, trace } = root
            && let Some(i) = ids.get(*id)
        {
            threads.insert(*thread, (i, *trace));
        }
    }
    for (id, root) in roots {
        let Some(i) = ids.get(id) else {
            *dangling += 1;
            continue;
        };
        let kind = match root {
            Root::Unknown => RootKind::Unknown,
            Root::JniGlobal => RootKind::JniGlobal,
            Root::JniLocal { thread, .. } => RootKind::JniLocal { thread },
            Root::JavaFrame { thread, depth } => RootKind::JavaLocal { thread, depth },
            Root::NativeStack { thread } => RootKind::NativeStack { thread },
            Root::StickyClass => RootKind::SystemClass,
            Root::ThreadBlock { thread } => RootKind::ThreadBlock { thread },
            Root::MonitorUsed => RootKind::BusyMonitor,
            Root::ThreadObject { thread, .. } => RootKind::Thread { thread },
        };
        out.push((i, kind));
    }
    // Every loaded class holds its statics; classes are roots until unloaded.
    for (ci, c) in classes.iter().enumerate() {
        if c.object == NONE {
            continue;
        }
        out.push((c.object, RootKind::Class));
        for (name, t, value) in &c.statics {
            if *t == ty::OBJECT
                && *value != 0
                && let Some(i) = ids.get(*value)
            {
                out.push((i, RootKind::Static(ci as u32, name.clone())));
            }
        }
    }
    out
}

struct Pass1<'a, 'p> {
    header: &'a Header,
    strings: HashMap<u64, String>,
    class_names: HashMap<u64, String>,
    class_serials: HashMap<u32, u64>,
    frames: Vec<FrameRecord>,
    traces: HashMap<u32, Vec<u64>>,
    roots: Vec<(u64, Root)>,
    classes: Vec<Class>,
    class_index: HashMap<u64, u32>,
    /// Per object, in file order: id, class-table index and array element count (sizes are
    /// computed once the layout is known).
    ids: SpillWriter<u64>,
    class_of: SpillWriter<u32>,
    counts: SpillWriter<u32>,
    /// The lowest and highest id.
    id_range: (u64, u64),
    /// The first failure to write a spill.
    error: Option<Error>,
    checkpoints: Vec<u64>,
    primitive_classes: [u32; 12],
    progress: Progress<'p>,
}

impl Pass1<'_, '_> {
    fn class_entry(&mut self, id: u64, kind: ClassKind) -> u32 {
        if let Some(&i) = self.class_index.get(&id) {
            return i;
        }
        let i = self.classes.len() as u32;
        self.classes.push(Class::new(id, String::new(), kind));
        self.class_index.insert(id, i);
        i
    }

    fn object(&mut self, offset: u64, id: u64, class: u32, count: u32) {
        if self.ids.len().is_multiple_of(CHECKPOINT) {
            self.checkpoints.push(offset);
        }
        self.id_range = (self.id_range.0.min(id), self.id_range.1.max(id));
        let r = self
            .ids
            .push(id)
            .and_then(|()| self.class_of.push(class))
            .and_then(|()| self.counts.push(count));
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
    }

    fn name(&self, id: u64) -> String {
        self.strings.get(&id).cloned().unwrap_or_default()
    }
}

impl Visitor for Pass1<'_, '_> {
    fn utf8(&mut self, id: u64, text: &[u8]) {
        self.strings
            .insert(id, String::from_utf8_lossy(text).into_owned());
    }

    fn load_class(&mut self, serial: u32, class_id: u64, name_id: u64) {
        let name = self.name(name_id);
        self.class_names.insert(class_id, name);
        self.class_serials.insert(serial, class_id);
    }

    fn frame(&mut self, frame: FrameRecord) {
        self.frames.push(frame);
    }

    fn trace(&mut self, serial: u32, _thread_serial: u32, frames: Vec<u64>) {
        self.traces.insert(serial, frames);
    }

    fn root(&mut self, id: u64, root: Root) {
        self.roots.push((id, root));
    }

    fn class_dump(&mut self, offset: u64, class: ClassDump) {
        let java_lang_class = self.class_entry(u64::MAX, ClassKind::Instance);
        let i = self.class_entry(class.id, ClassKind::Instance) as usize;
        let fields = class
            .fields
            .iter()
            .map(|&(n, t)| (self.name(n), t))
            .collect();
        let statics = class
            .statics
            .iter()
            .map(|&(n, t, v)| (self.name(n), t, v))
            .collect();
        let c = &mut self.classes[i];
        c.super_id = class.super_id;
        c.loader_id = class.loader_id;
        c.fields = fields;
        c.statics = statics;
        c.dumped = true;
        // The class object itself is an object of the dump, of class java.lang.Class (its
        // class-table entry is fixed up by name after the pass).
        self.object(offset, class.id, java_lang_class, 0);
    }

    fn instance(&mut self, offset: u64, id: u64, class_id: u64, _size: u32, _fields: &[u8]) {
        let c = self.class_entry(class_id, ClassKind::Instance);
        self.object(offset, id, c, 0);
    }

    fn object_array(&mut self, offset: u64, id: u64, class_id: u64, n: u32, _elements: &[u8]) {
        let c = self.class_entry(class_id, ClassKind::ObjectArray);
        self.classes[c as usize].kind = ClassKind::ObjectArray;
        self.object(offset, id, c, n);
    }

    fn primitive_array(&mut self, offset: u64, id: u64, t: u8, n: u32, _data: &[u8]) {
        let mut c = self.primitive_classes[t as usize];
        if c == NONE {
            c = self.classes.len() as u32;
            self.classes.push(Class::new(
                0,
                reader::primitive_array_name(t).to_string(),
                ClassKind::PrimitiveArray(t),
            ));
            self.primitive_classes[t as usize] = c;
        }
        self.object(offset, id, c, n);
    }

    fn progress(&mut self, offset: u64) {
        (self.progress)("reading classes and objects", offset, self.header.file_len);
    }
}

struct Pass2<'a, 'p> {
    header: &'a Header,
    classes: &'a [Class],
    ids: &'a IdIndex,
    /// The objects' classes, read in step with the file.
    class_of: SpillReader<'a, u32>,
    starts: Vec<u32>,
    edges: SpillWriter<u32>,
    dangling: u64,
    next: usize,
    error: Option<Error>,
    progress: Progress<'p>,
}

impl Pass2<'_, '_> {
    fn add(&mut self, id: u64) {
        if id == 0 {
            return;
        }
        match self.ids.get(id) {
            Some(i) => {
                if let Err(e) = self.edges.push(i) {
                    self.error.get_or_insert(e);
                }
            }
            None => self.dangling += 1,
        }
    }

    /// Starts the next object; returns its class-table index, or `None` after an error.
    fn begin(&mut self, offset: u64, id: u64) -> Option<u32> {
        if self.error.is_some() {
            return None;
        }
        if self.ids.get(id) != Some(self.next as u32) {
            self.error = Some(Error::Corrupt {
                record: "an object",
                offset,
                detail: "the file changed between the two passes".into(),
            });
            return None;
        }
        if self.edges.len() >= u32::MAX as usize {
            self.error = Some(Error::Corrupt {
                record: "an object",
                offset,
                detail: "more than 4 billion references".into(),
            });
            return None;
        }
        let class = match self.class_of.next_value() {
            Ok(c) => c,
            Err(e) => {
                self.error = Some(e);
                return None;
            }
        };
        self.starts.push(self.edges.len() as u32);
        self.next += 1;
        Some(class)
    }

    fn id_at(&self, bytes: &[u8], at: usize) -> u64 {
        if self.header.id_size == 4 {
            bytes.get(at..at + 4).map_or(0, |b| {
                u64::from(u32::from_be_bytes(b.try_into().expect("4")))
            })
        } else {
            bytes
                .get(at..at + 8)
                .map_or(0, |b| u64::from_be_bytes(b.try_into().expect("8")))
        }
    }
}

impl Visitor for Pass2<'_, '_> {
    fn wants_contents(&self) -> bool {
        true
    }

    fn class_dump(&mut self, offset: u64, class: ClassDump) {
        if self.begin(offset, class.id).is_none() {
            return;
        }
        self.add(class.super_id);
        self.add(class.loader_id);
        for &(_, t, v) in &class.statics {
            if t == ty::OBJECT {
                self.add(v);
            }
        }
    }

    fn instance(&mut self, offset: u64, id: u64, _class_id: u64, _size: u32, fields: &[u8]) {
        let Some(c) = self.begin(offset, id) else {
            return;
        };
        let classes = self.classes;
        for &at in &classes[c as usize].ref_offsets {
            let v = self.id_at(fields, at as usize);
            self.add(v);
        }
    }

    fn object_array(&mut self, offset: u64, id: u64, _class_id: u64, n: u32, elements: &[u8]) {
        if self.begin(offset, id).is_none() {
            return;
        }
        let size = self.header.id_size as usize;
        for k in 0..n as usize {
            let v = self.id_at(elements, k * size);
            self.add(v);
        }
    }

    fn primitive_array(&mut self, offset: u64, id: u64, _t: u8, _n: u32, _data: &[u8]) {
        self.begin(offset, id);
    }

    fn progress(&mut self, offset: u64) {
        (self.progress)("reading references", offset, self.header.file_len);
    }
}

/// The second pass: every object's references, as CSR starts (in RAM) and edges (spilled, to
/// be read back at their exact size); also the references to missing objects.
fn pass2(
    path: &Path,
    header: &Header,
    classes: &[Class],
    ids: &IdIndex,
    class_of: &Spill<u32>,
    objects: usize,
    progress: Progress<'_>,
) -> Result<(Vec<u32>, Spill<u32>, u64)> {
    let mut p2 = Pass2 {
        header,
        classes,
        ids,
        class_of: class_of.reader(),
        starts: Vec::with_capacity(objects + 1),
        edges: SpillWriter::new()?,
        dangling: 0,
        next: 0,
        error: None,
        progress,
    };
    reader::scan(path, header, &mut p2)?;
    if let Some(e) = p2.error {
        return Err(e);
    }
    if p2.next != objects {
        return Err(Error::Corrupt {
            record: "the heap dump",
            offset: 0,
            detail: "the file changed between the two passes".into(),
        });
    }
    let mut starts = p2.starts;
    starts.push(p2.edges.len() as u32);
    Ok((starts, p2.edges.finish()?, p2.dangling))
}
