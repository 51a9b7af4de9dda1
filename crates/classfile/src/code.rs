//! The label-based code IR: every code offset becomes a [`Label`] on read (branch and switch
//! targets, exception table, LineNumberTable, LocalVariable(Type)Table, StackMapTable positions,
//! `Uninitialized(offset)` and type-annotation targets), so instructions can be inserted anywhere.
//! [`Code::encode`] lays the code out again to a fixed point (switch padding, jump widening) and
//! re-encodes every frame in its most compact legal form.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::bytes::{Cursor, put_u2, put_u4};
use crate::class::{ACC_STATIC, ClassFile, read_attributes};
use crate::constant_pool::ConstantPool;
use crate::error::{Error, RawError, RawResult, Result};
use crate::opcodes::*;

/// A position in the code. Placed by an [`Insn::Label`] in [`Code::insns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(pub u32);

/// One instruction (or a label). Operands are kept as in the class file; offsets are labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Insn {
    Label(Label),
    /// Any instruction without operands.
    Simple(u8),
    Bipush(i8),
    Sipush(i16),
    /// `ldc`, `ldc_w` or `ldc2_w`; `ldc` becomes `ldc_w` if the index no longer fits a byte.
    Ldc {
        op: u8,
        index: u16,
    },
    /// `iload`..`aload`, `istore`..`astore`, `ret` (narrow opcode; `wide` is added when needed).
    Local {
        op: u8,
        index: u16,
    },
    Iinc {
        index: u16,
        delta: i16,
    },
    /// Instructions with one constant-pool operand: field access, `invokevirtual`,
    /// `invokespecial`, `invokestatic`, `new`, `anewarray`, `checkcast`, `instanceof`.
    Ref {
        op: u8,
        index: u16,
    },
    InvokeInterface {
        index: u16,
        count: u8,
    },
    InvokeDynamic {
        index: u16,
    },
    NewArray(u8),
    MultiANewArray {
        index: u16,
        dims: u8,
    },
    /// A branch; `goto_w`/`jsr_w` are read as `goto`/`jsr` and widened again by layout if needed.
    Jump {
        op: u8,
        target: Label,
    },
    TableSwitch {
        default: Label,
        low: i32,
        targets: Vec<Label>,
    },
    LookupSwitch {
        default: Label,
        pairs: Vec<(i32, Label)>,
    },
}

impl Insn {
    /// The opcode (`None` for labels).
    pub fn opcode(&self) -> Option<u8> {
        Some(match self {
            Insn::Label(_) => return None,
            Insn::Simple(op) => *op,
            Insn::Bipush(_) => 0x10,
            Insn::Sipush(_) => 0x11,
            Insn::Ldc { op, .. }
            | Insn::Local { op, .. }
            | Insn::Ref { op, .. }
            | Insn::Jump { op, .. } => *op,
            Insn::Iinc { .. } => IINC,
            Insn::InvokeInterface { .. } => 0xb9,
            Insn::InvokeDynamic { .. } => 0xba,
            Insn::NewArray(_) => 0xbc,
            Insn::MultiANewArray { .. } => 0xc5,
            Insn::TableSwitch { .. } => TABLESWITCH,
            Insn::LookupSwitch { .. } => LOOKUPSWITCH,
        })
    }
    /// Labels this instruction may transfer control to.
    pub fn targets(&self) -> Vec<Label> {
        match self {
            Insn::Jump { target, .. } => vec![*target],
            Insn::TableSwitch {
                default, targets, ..
            } => {
                let mut v = targets.clone();
                v.push(*default);
                v
            }
            Insn::LookupSwitch { default, pairs } => {
                let mut v: Vec<Label> = pairs.iter().map(|p| p.1).collect();
                v.push(*default);
                v
            }
            _ => Vec::new(),
        }
    }
    /// Pushes an int constant in the shortest form (`ldc` needs a constant-pool entry).
    pub fn push_int(cp: &mut ConstantPool, v: i32) -> Result<Insn> {
        Ok(match v {
            -1..=5 => Insn::Simple((0x03 + v) as u8),
            -128..=127 => Insn::Bipush(v as i8),
            -32768..=32767 => Insn::Sipush(v as i16),
            _ => {
                let index = cp.add_integer(v).map_err(|e| e.in_class("<pool>"))?;
                Insn::Ldc { op: LDC_W, index }
            }
        })
    }
}

/// One exception-table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    pub start: Label,
    pub end: Label,
    pub handler: Label,
    /// Class constant, or 0 for "any".
    pub catch_type: u16,
}

/// A verification type (JVMS 4.10.1.2) as written in a StackMapTable (long/double take one entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VType {
    Top,
    Integer,
    Float,
    Double,
    Long,
    Null,
    UninitializedThis,
    /// A Class constant.
    Object(u16),
    /// The object created by the `new` instruction at this label.
    Uninitialized(Label),
}

/// A full stack-map frame at a label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub label: Label,
    pub locals: Vec<VType>,
    pub stack: Vec<VType>,
}

/// A local-variable (type) table entry covering `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalVar {
    pub start: Label,
    pub end: Label,
    pub name_index: u16,
    pub descriptor_index: u16,
    pub index: u16,
}

/// Where a type annotation inside Code points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeTarget {
    /// 0x40, 0x41: local variables (start, end, slot).
    LocalVar(u8, Vec<(Label, Label, u16)>),
    /// 0x42: an exception-table index.
    Catch(u16),
    /// 0x43..=0x46: an instruction.
    Offset(u8, Label),
    /// 0x47..=0x4b: an instruction and a type argument index.
    TypeArgument(u8, Label, u8),
}

/// A type annotation in a Code attribute; `rest` is its type_path and annotation, verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeAnnotation {
    pub target: TypeTarget,
    pub rest: Vec<u8>,
}

/// The body of an attribute of the Code attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeAttrBody {
    LineNumbers(Vec<(Label, u16)>),
    LocalVariables(Vec<LocalVar>),
    LocalVariableTypes(Vec<LocalVar>),
    StackMap(Vec<Frame>),
    TypeAnnotations(Vec<TypeAnnotation>),
    /// Unknown attributes may hold code offsets we cannot relocate: they are dropped on encode.
    Other(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeAttr {
    pub name_index: u16,
    pub body: CodeAttrBody,
}

/// A method's code as a label IR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    pub max_stack: u16,
    pub max_locals: u16,
    pub insns: Vec<Insn>,
    pub handlers: Vec<Handler>,
    pub attributes: Vec<CodeAttr>,
    /// The implicit first frame (from the descriptor), which compact frames are relative to.
    pub initial_locals: Vec<VType>,
    /// Class-file major version (frames are required from 50 on).
    pub major: u16,
    /// Placeholder Class indices in `initial_locals` for parameter types not in the pool.
    placeholders: Placeholders,
    next_label: u32,
}

/// The result of one layout attempt.
enum Laid {
    /// Code bytes and each label's offset.
    Done(Vec<u8>, Vec<Option<u32>>),
    /// Conditional jump at this index is out of reach and needs a trampoline (offsets given).
    NeedTrampoline(usize, Vec<u32>),
}

/// Labels created on read, one per referenced offset.
struct Labels {
    by_offset: BTreeMap<u32, Label>,
    next: u32,
}

impl Labels {
    fn at(&mut self, off: u32) -> Label {
        let next = &mut self.next;
        *self.by_offset.entry(off).or_insert_with(|| {
            *next += 1;
            Label(*next - 1)
        })
    }
}

fn rel(at: usize, delta: i32) -> RawResult<u32> {
    let t = at as i64 + i64::from(delta);
    u32::try_from(t).map_err(|_| RawError::new(at, format!("branch target {t} is negative")))
}

impl Code {
    /// Reads method `index`'s Code attribute into the IR; `Ok(None)` if it has none.
    pub fn read(cf: &ClassFile, index: usize) -> Result<Option<Code>> {
        let name = cf.name();
        let Some(m) = cf.methods.get(index) else {
            return Err(cf.error(0, format!("no method #{index}")));
        };
        let Some(ai) = cf.find_attribute(&m.attributes, "Code") else {
            return Ok(None);
        };
        let attr = m.attributes[ai].clone();
        let mname = cf.member_name(m);
        let desc = cf.member_descriptor(m);
        let access = m.access;
        let (initial_locals, placeholders) =
            initial_frame(&cf.constant_pool, cf.this_class, access, &mname, &desc)
                .map_err(|e| e.in_class(&name))?;
        let major = cf.major;
        Self::parse(
            &cf.constant_pool,
            &attr.data,
            attr.offset,
            initial_locals,
            major,
        )
        .map(|mut c| {
            c.placeholders = placeholders;
            Some(c)
        })
        .map_err(|e| {
            let mut e = e.in_class(&name);
            e.what = format!("method {mname}{desc}: {}", e.what);
            e
        })
    }

    fn parse(
        cp: &ConstantPool,
        data: &[u8],
        base: usize,
        initial_locals: Vec<VType>,
        major: u16,
    ) -> RawResult<Code> {
        let mut c = Cursor::new(data, base);
        let max_stack = c.u2("max_stack")?;
        let max_locals = c.u2("max_locals")?;
        let code_len = c.u4("code_length")? as usize;
        let code_base = c.offset();
        let code = c.bytes(code_len, "code")?;
        if code_len == 0 || code_len > 65535 {
            return Err(RawError::new(
                code_base,
                format!("code_length {code_len} out of range"),
            ));
        }
        let mut labels = Labels {
            by_offset: BTreeMap::new(),
            next: 0,
        };
        let decoded = decode_insns(code, code_base, &mut labels)?;
        let mut boundary = vec![false; code_len + 1];
        for (off, _) in &decoded {
            boundary[*off as usize] = true;
        }
        boundary[code_len] = true;

        let n = c.u2("exception_table_length")?;
        let mut handlers = Vec::with_capacity(usize::from(n));
        for _ in 0..n {
            let start = c.u2("start_pc")?;
            let end = c.u2("end_pc")?;
            let h = c.u2("handler_pc")?;
            let catch_type = c.u2("catch_type")?;
            if start >= end || usize::from(end) > code_len || usize::from(h) >= code_len {
                return Err(c.err(format!("bad exception range {start}..{end} -> {h}")));
            }
            if catch_type != 0 && cp.class_name(catch_type).is_none() {
                return Err(c.err(format!("catch_type #{catch_type} is not a Class constant")));
            }
            handlers.push(Handler {
                start: labels.at(u32::from(start)),
                end: labels.at(u32::from(end)),
                handler: labels.at(u32::from(h)),
                catch_type,
            });
        }
        let raw_attrs = read_attributes(&mut c, cp)?;
        if c.remaining() != 0 {
            return Err(c.err("extra bytes at the end of the Code attribute"));
        }
        let mut attributes = Vec::new();
        for a in raw_attrs {
            let name = cp.utf8_bytes(a.name_index).unwrap_or_default();
            let mut ac = Cursor::new(&a.data, a.offset);
            let body = match name {
                b"LineNumberTable" => {
                    CodeAttrBody::LineNumbers(read_line_numbers(&mut ac, &mut labels)?)
                }
                b"LocalVariableTable" => {
                    CodeAttrBody::LocalVariables(read_local_vars(&mut ac, &mut labels)?)
                }
                b"LocalVariableTypeTable" => {
                    CodeAttrBody::LocalVariableTypes(read_local_vars(&mut ac, &mut labels)?)
                }
                b"StackMapTable" => CodeAttrBody::StackMap(read_frames(
                    &mut ac,
                    cp,
                    &mut labels,
                    &initial_locals,
                    code,
                    code_len,
                )?),
                b"RuntimeVisibleTypeAnnotations" | b"RuntimeInvisibleTypeAnnotations" => {
                    CodeAttrBody::TypeAnnotations(read_type_annotations(&mut ac, &mut labels)?)
                }
                _ => CodeAttrBody::Other(a.data.clone()),
            };
            if !matches!(body, CodeAttrBody::Other(_)) && ac.remaining() != 0 {
                return Err(ac.err("extra bytes at the end of the attribute"));
            }
            attributes.push(CodeAttr {
                name_index: a.name_index,
                body,
            });
        }
        // Every label must sit on an instruction boundary (or the end of the code).
        for &off in labels.by_offset.keys() {
            if !boundary.get(off as usize).copied().unwrap_or(false) {
                return Err(RawError::new(
                    code_base,
                    format!("code offset {off} is not an instruction boundary"),
                ));
            }
        }
        let mut insns = Vec::with_capacity(decoded.len() + labels.by_offset.len());
        for (off, insn) in decoded {
            if let Some(l) = labels.by_offset.get(&off) {
                insns.push(Insn::Label(*l));
            }
            insns.push(insn);
        }
        if let Some(l) = labels.by_offset.get(&(code_len as u32)) {
            insns.push(Insn::Label(*l));
        }
        Ok(Code {
            max_stack,
            max_locals,
            insns,
            handlers,
            attributes,
            initial_locals,
            major,
            placeholders: Vec::new(),
            next_label: labels.next,
        })
    }

    /// Indices in `insns` of the return instructions (`ireturn` .. `return`).
    pub fn return_indices(&self) -> Vec<usize> {
        self.insns
            .iter()
            .enumerate()
            .filter(|(_, x)| matches!(x, Insn::Simple(op) if crate::opcodes::is_return(*op)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Where each placed label is: its index in `insns`.
    pub fn label_positions(&self) -> HashMap<Label, usize> {
        self.insns
            .iter()
            .enumerate()
            .filter_map(|(i, x)| match x {
                Insn::Label(l) => Some((*l, i)),
                _ => None,
            })
            .collect()
    }

    /// A fresh label (place it with [`Insn::Label`]).
    pub fn new_label(&mut self) -> Label {
        self.next_label += 1;
        Label(self.next_label - 1)
    }

    /// The StackMapTable frames, if the code has that attribute.
    pub fn frames(&self) -> Option<&Vec<Frame>> {
        self.attributes.iter().find_map(|a| match &a.body {
            CodeAttrBody::StackMap(f) => Some(f),
            _ => None,
        })
    }

    /// The StackMapTable frames, mutable.
    pub fn frames_mut(&mut self) -> Option<&mut Vec<Frame>> {
        self.attributes.iter_mut().find_map(|a| match &mut a.body {
            CodeAttrBody::StackMap(f) => Some(f),
            _ => None,
        })
    }

    /// Adds a frame, creating the StackMapTable attribute if needed.
    pub fn add_frame(&mut self, cp: &mut ConstantPool, frame: Frame) -> Result<()> {
        if let Some(f) = self.frames_mut() {
            f.push(frame);
            return Ok(());
        }
        let name_index = cp
            .add_utf8("StackMapTable")
            .map_err(|e| e.in_class("<pool>"))?;
        self.attributes.push(CodeAttr {
            name_index,
            body: CodeAttrBody::StackMap(vec![frame]),
        });
        Ok(())
    }

    /// Allocates a new local variable of type `t` and declares it in every existing frame, so
    /// that it stays usable across branch targets without any type inference. The caller must
    /// store it before the first frame position (e.g. in code inserted at index 0).
    /// Returns the slot.
    pub fn add_local(&mut self, t: VType) -> Result<u16> {
        let err = |what: &str| Error {
            class: String::new(),
            offset: 0,
            what: what.to_string(),
        };
        let slot = self.max_locals;
        let size: u16 = if matches!(t, VType::Long | VType::Double) {
            2
        } else {
            1
        };
        self.max_locals = slot
            .checked_add(size)
            .ok_or_else(|| err("too many locals"))?;
        if let Some(frames) = self.frames_mut() {
            for f in frames {
                let mut slots: u32 = f
                    .locals
                    .iter()
                    .map(|v| {
                        if matches!(v, VType::Long | VType::Double) {
                            2
                        } else {
                            1
                        }
                    })
                    .sum();
                if slots > u32::from(slot) {
                    return Err(err("a frame has more locals than max_locals"));
                }
                while slots < u32::from(slot) {
                    f.locals.push(VType::Top);
                    slots += 1;
                }
                f.locals.push(t);
            }
        }
        Ok(slot)
    }

    /// Inserts `code` just before the real instruction at `pos` (after the labels that precede
    /// it, so jumps to that instruction now run `code` first). References that must point at the
    /// instruction itself (`Uninitialized(new)` and type-annotation offsets) are moved to a
    /// fresh label placed right before it.
    pub fn insert_before(&mut self, pos: usize, code: Vec<Insn>) {
        self.insert_many(vec![(pos, code)]);
    }

    /// [`Code::insert_before`] for many positions at once (indices into the current `insns`,
    /// each at most once), in one pass over the code.
    pub fn insert_many(&mut self, mut inserts: Vec<(usize, Vec<Insn>)>) {
        inserts.sort_by_key(|x| x.0);
        let pinned = self.instruction_refs();
        let mut remap: HashMap<Label, Label> = HashMap::new();
        let old = std::mem::take(&mut self.insns);
        let extra: usize = inserts.iter().map(|x| x.1.len() + 1).sum();
        let mut out = Vec::with_capacity(old.len() + extra);
        let mut next = inserts.into_iter().peekable();
        for (i, insn) in old.into_iter().enumerate() {
            while let Some((_, code)) = next.next_if(|x| x.0 == i) {
                // Labels directly before this instruction that something pins to it.
                let mut k = out.len();
                let mut pinned_here = Vec::new();
                while k > 0 {
                    match out[k - 1] {
                        Insn::Label(l) => {
                            if pinned.contains(&l) {
                                pinned_here.push(l);
                            }
                            k -= 1;
                        }
                        _ => break,
                    }
                }
                out.extend(code);
                if !pinned_here.is_empty() {
                    let fresh = self.new_label();
                    for l in pinned_here {
                        remap.insert(l, fresh);
                    }
                    out.push(Insn::Label(fresh));
                }
            }
            out.push(insn);
        }
        // Insertions at the end (index == len).
        for (_, code) in next {
            out.extend(code);
        }
        self.insns = out;
        if !remap.is_empty() {
            self.retarget_instruction_refs(&remap);
        }
    }

    /// Labels that must stay on their instruction: `Uninitialized(new)` and type-annotation
    /// offsets.
    fn instruction_refs(&self) -> HashSet<Label> {
        let mut set = HashSet::new();
        for a in &self.attributes {
            match &a.body {
                CodeAttrBody::StackMap(fs) => {
                    for f in fs {
                        for v in f.locals.iter().chain(&f.stack) {
                            if let VType::Uninitialized(l) = v {
                                set.insert(*l);
                            }
                        }
                    }
                }
                CodeAttrBody::TypeAnnotations(ts) => {
                    for t in ts {
                        if let TypeTarget::Offset(_, l) | TypeTarget::TypeArgument(_, l, _) =
                            t.target
                        {
                            set.insert(l);
                        }
                    }
                }
                _ => {}
            }
        }
        set
    }

    fn retarget_instruction_refs(&mut self, remap: &HashMap<Label, Label>) {
        for a in &mut self.attributes {
            match &mut a.body {
                CodeAttrBody::StackMap(fs) => {
                    for f in fs {
                        for v in f.locals.iter_mut().chain(f.stack.iter_mut()) {
                            if let VType::Uninitialized(l) = v
                                && let Some(n) = remap.get(l)
                            {
                                *l = *n;
                            }
                        }
                    }
                }
                CodeAttrBody::TypeAnnotations(ts) => {
                    for t in ts {
                        if let TypeTarget::Offset(_, l) | TypeTarget::TypeArgument(_, l, _) =
                            &mut t.target
                            && let Some(n) = remap.get(l)
                        {
                            *l = *n;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Lays the code out and encodes the Code attribute body. Errors (code too large, a jump
    /// that cannot be widened) leave nothing changed: the caller keeps the old attribute.
    pub fn encode(&self, cp: &mut ConstantPool, class: &str) -> Result<Vec<u8>> {
        self.encode_raw(cp).map_err(|e| e.in_class(class))
    }

    fn encode_raw(&self, cp: &mut ConstantPool) -> RawResult<Vec<u8>> {
        if cp.len() >= usize::from(PLACEHOLDER_BASE) - self.placeholders.len() {
            return Err(RawError::new(
                0,
                "constant pool too large for placeholder class indices",
            ));
        }
        let mut owned: Option<Code> = None;
        let (code, label_off) = loop {
            let c = owned.as_ref().unwrap_or(self);
            match c.layout()? {
                Laid::Done(code, offs) => break (code, offs),
                Laid::NeedTrampoline(i, offs) => {
                    let mut n = c.clone();
                    n.add_trampoline(i, &offs)?;
                    owned = Some(n);
                }
            }
        };
        let this = owned.as_ref().unwrap_or(self);
        let off = |l: Label| -> RawResult<u32> {
            label_off
                .get(l.0 as usize)
                .copied()
                .flatten()
                .ok_or_else(|| RawError::new(0, format!("label {} is used but never placed", l.0)))
        };
        let mut frame_bodies = Vec::new();
        for a in &this.attributes {
            if let CodeAttrBody::StackMap(frames) = &a.body {
                let mut b = Vec::new();
                this.write_frames(&mut b, frames, &off, cp)?;
                frame_bodies.push(b);
            }
        }
        let mut frame_bodies = frame_bodies.into_iter();
        let mut out = Vec::with_capacity(code.len() + 64);
        put_u2(&mut out, this.max_stack);
        put_u2(&mut out, this.max_locals);
        put_u4(&mut out, code.len() as u32);
        out.extend_from_slice(&code);
        put_u2(&mut out, this.handlers.len() as u16);
        for h in &this.handlers {
            let (s, e) = (off(h.start)?, off(h.end)?);
            if s >= e {
                return Err(RawError::new(
                    s as usize,
                    "empty exception range after layout",
                ));
            }
            put_u2(&mut out, s as u16);
            put_u2(&mut out, e as u16);
            put_u2(&mut out, off(h.handler)? as u16);
            put_u2(&mut out, h.catch_type);
        }
        let kept: Vec<&CodeAttr> = self
            .attributes
            .iter()
            .filter(|a| !matches!(a.body, CodeAttrBody::Other(_)))
            .collect();
        put_u2(&mut out, kept.len() as u16);
        for a in kept {
            let mut b = Vec::new();
            match &a.body {
                CodeAttrBody::LineNumbers(v) => {
                    put_u2(&mut b, v.len() as u16);
                    for (l, line) in v {
                        put_u2(&mut b, off(*l)? as u16);
                        put_u2(&mut b, *line);
                    }
                }
                CodeAttrBody::LocalVariables(v) | CodeAttrBody::LocalVariableTypes(v) => {
                    put_u2(&mut b, v.len() as u16);
                    for lv in v {
                        let (s, e) = (off(lv.start)?, off(lv.end)?);
                        put_u2(&mut b, s as u16);
                        put_u2(&mut b, e.saturating_sub(s) as u16);
                        put_u2(&mut b, lv.name_index);
                        put_u2(&mut b, lv.descriptor_index);
                        put_u2(&mut b, lv.index);
                    }
                }
                CodeAttrBody::StackMap(_) => b = frame_bodies.next().unwrap_or_default(),
                CodeAttrBody::TypeAnnotations(v) => {
                    put_u2(&mut b, v.len() as u16);
                    for t in v {
                        match &t.target {
                            TypeTarget::LocalVar(tt, table) => {
                                b.push(*tt);
                                put_u2(&mut b, table.len() as u16);
                                for (s, e, i) in table {
                                    let (s, e) = (off(*s)?, off(*e)?);
                                    put_u2(&mut b, s as u16);
                                    put_u2(&mut b, e.saturating_sub(s) as u16);
                                    put_u2(&mut b, *i);
                                }
                            }
                            TypeTarget::Catch(i) => {
                                b.push(0x42);
                                put_u2(&mut b, *i);
                            }
                            TypeTarget::Offset(tt, l) => {
                                b.push(*tt);
                                put_u2(&mut b, off(*l)? as u16);
                            }
                            TypeTarget::TypeArgument(tt, l, i) => {
                                b.push(*tt);
                                put_u2(&mut b, off(*l)? as u16);
                                b.push(*i);
                            }
                        }
                        b.extend_from_slice(&t.rest);
                    }
                }
                CodeAttrBody::Other(_) => continue,
            }
            put_u2(&mut out, a.name_index);
            put_u4(&mut out, b.len() as u32);
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    fn write_frames(
        &self,
        b: &mut Vec<u8>,
        frames: &[Frame],
        off: &dyn Fn(Label) -> RawResult<u32>,
        cp: &mut ConstantPool,
    ) -> RawResult<()> {
        let mut placed = Vec::with_capacity(frames.len());
        for f in frames {
            placed.push((off(f.label)?, f));
        }
        placed.sort_by_key(|p| p.0);
        put_u2(b, placed.len() as u16);
        let mut prev_locals: &[VType] = &self.initial_locals;
        let mut prev_off: Option<u32> = None;
        for (o, f) in placed {
            let delta = match prev_off {
                None => o,
                Some(p) if o > p => o - p - 1,
                Some(_) => {
                    return Err(RawError::new(
                        o as usize,
                        "two stack-map frames at one offset",
                    ));
                }
            };
            prev_off = Some(o);
            let delta = u16::try_from(delta)
                .map_err(|_| RawError::new(o as usize, "frame offset too large"))?;
            let same_locals = f.locals == prev_locals;
            let pl = prev_locals.len();
            let nl = f.locals.len();
            if same_locals && f.stack.is_empty() {
                if delta < 64 {
                    b.push(delta as u8);
                } else {
                    b.push(251);
                    put_u2(b, delta);
                }
            } else if same_locals && f.stack.len() == 1 {
                if delta < 64 {
                    b.push(64 + delta as u8);
                } else {
                    b.push(247);
                    put_u2(b, delta);
                }
                self.write_vtype(b, &f.stack[0], off, cp)?;
            } else if f.stack.is_empty()
                && nl < pl
                && pl - nl <= 3
                && f.locals[..] == prev_locals[..nl]
            {
                b.push((251 - (pl - nl)) as u8);
                put_u2(b, delta);
            } else if f.stack.is_empty()
                && nl > pl
                && nl - pl <= 3
                && f.locals[..pl] == *prev_locals
            {
                b.push((251 + (nl - pl)) as u8);
                put_u2(b, delta);
                for v in &f.locals[pl..] {
                    self.write_vtype(b, v, off, cp)?;
                }
            } else {
                b.push(255);
                put_u2(b, delta);
                put_u2(b, nl as u16);
                for v in &f.locals {
                    self.write_vtype(b, v, off, cp)?;
                }
                put_u2(b, f.stack.len() as u16);
                for v in &f.stack {
                    self.write_vtype(b, v, off, cp)?;
                }
            }
            prev_locals = &f.locals;
        }
        Ok(())
    }

    fn write_vtype(
        &self,
        b: &mut Vec<u8>,
        v: &VType,
        off: &dyn Fn(Label) -> RawResult<u32>,
        cp: &mut ConstantPool,
    ) -> RawResult<()> {
        match v {
            VType::Top => b.push(0),
            VType::Integer => b.push(1),
            VType::Float => b.push(2),
            VType::Double => b.push(3),
            VType::Long => b.push(4),
            VType::Null => b.push(5),
            VType::UninitializedThis => b.push(6),
            VType::Object(i) => {
                let i = &match self.placeholders.iter().find(|p| p.0 == *i) {
                    Some((_, name)) => cp.add_class(name)?,
                    None => *i,
                };
                if cp.class_name(*i).is_none() {
                    return Err(RawError::new(
                        0,
                        format!("frame type #{i} is not a Class constant"),
                    ));
                }
                b.push(7);
                put_u2(b, *i);
            }
            VType::Uninitialized(l) => {
                b.push(8);
                put_u2(b, off(*l)? as u16);
            }
        }
        Ok(())
    }

    /// Computes offsets to a fixed point: switch padding depends on position, and a jump whose
    /// target is beyond ±32 KiB is widened (`goto`→`goto_w`, `jsr`→`jsr_w`, a conditional to
    /// its inverse over a `goto_w`). Returns the code bytes and each label's offset.
    fn layout(&self) -> RawResult<Laid> {
        let has_frames = self.major >= 50;
        let mut wide = vec![false; self.insns.len()];
        let mut label_off: Vec<Option<u32>> = vec![None; self.next_label as usize];
        let mut insn_off = vec![0u32; self.insns.len()];
        loop {
            let mut o: u32 = 0;
            for (i, insn) in self.insns.iter().enumerate() {
                insn_off[i] = o;
                if let Insn::Label(l) = insn {
                    match label_off.get_mut(l.0 as usize) {
                        Some(slot) => *slot = Some(o),
                        None => {
                            return Err(RawError::new(
                                0,
                                format!("label {} was not made by this code", l.0),
                            ));
                        }
                    }
                }
                o = o.saturating_add(insn_size(insn, o, wide[i]));
            }
            if o > 65535 {
                return Err(RawError::new(
                    o as usize,
                    format!("code is {o} bytes, over the 65535-byte limit"),
                ));
            }
            let mut changed = false;
            for (i, insn) in self.insns.iter().enumerate() {
                if let Insn::Jump { target, .. } = insn {
                    if wide[i] {
                        continue;
                    }
                    let t = label_off
                        .get(target.0 as usize)
                        .copied()
                        .flatten()
                        .ok_or_else(|| {
                            RawError::new(0, format!("jump to unplaced label {}", target.0))
                        })?;
                    let d = i64::from(t) - i64::from(insn_off[i]);
                    if i16::try_from(d).is_err() {
                        if has_frames && is_conditional(insn.opcode().unwrap_or(0)) {
                            return Ok(Laid::NeedTrampoline(i, insn_off));
                        }
                        wide[i] = true;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut out = Vec::with_capacity(insn_off.last().copied().unwrap_or(0) as usize + 16);
        let target = |l: &Label| label_off.get(l.0 as usize).copied().flatten().unwrap_or(0);
        for (i, insn) in self.insns.iter().enumerate() {
            let at = insn_off[i];
            debug_assert_eq!(out.len(), at as usize);
            let d = |l: &Label| (i64::from(target(l)) - i64::from(at)) as i32;
            match insn {
                Insn::Label(_) => {}
                Insn::Simple(op) => out.push(*op),
                Insn::Bipush(v) => out.extend_from_slice(&[0x10, *v as u8]),
                Insn::Sipush(v) => {
                    out.push(0x11);
                    put_u2(&mut out, *v as u16);
                }
                Insn::Ldc { op, index } => {
                    if *op == LDC && *index <= 255 {
                        out.extend_from_slice(&[LDC, *index as u8]);
                    } else {
                        out.push(if *op == LDC2_W { LDC2_W } else { LDC_W });
                        put_u2(&mut out, *index);
                    }
                }
                Insn::Local { op, index } => {
                    if *index <= 255 {
                        out.extend_from_slice(&[*op, *index as u8]);
                    } else {
                        out.extend_from_slice(&[WIDE, *op]);
                        put_u2(&mut out, *index);
                    }
                }
                Insn::Iinc { index, delta } => {
                    if *index <= 255 && i8::try_from(*delta).is_ok() {
                        out.extend_from_slice(&[IINC, *index as u8, *delta as u8]);
                    } else {
                        out.extend_from_slice(&[WIDE, IINC]);
                        put_u2(&mut out, *index);
                        put_u2(&mut out, *delta as u16);
                    }
                }
                Insn::Ref { op, index } => {
                    out.push(*op);
                    put_u2(&mut out, *index);
                }
                Insn::InvokeInterface { index, count } => {
                    out.push(0xb9);
                    put_u2(&mut out, *index);
                    out.extend_from_slice(&[*count, 0]);
                }
                Insn::InvokeDynamic { index } => {
                    out.push(0xba);
                    put_u2(&mut out, *index);
                    out.extend_from_slice(&[0, 0]);
                }
                Insn::NewArray(t) => out.extend_from_slice(&[0xbc, *t]),
                Insn::MultiANewArray { index, dims } => {
                    out.push(0xc5);
                    put_u2(&mut out, *index);
                    out.push(*dims);
                }
                Insn::Jump { op, target: t } => {
                    if !wide[i] {
                        out.push(*op);
                        put_u2(&mut out, d(t) as u16);
                    } else if *op == GOTO || *op == JSR {
                        out.push(if *op == GOTO { GOTO_W } else { JSR_W });
                        put_u4(&mut out, d(t) as u32);
                    } else {
                        // Only without stack maps (a trampoline is used with them).
                        out.push(invert(*op));
                        put_u2(&mut out, 8);
                        out.push(GOTO_W);
                        put_u4(&mut out, (d(t) - 3) as u32);
                    }
                }
                Insn::TableSwitch {
                    default,
                    low,
                    targets,
                } => {
                    out.push(TABLESWITCH);
                    out.resize(out.len() + pad(at), 0);
                    put_u4(&mut out, d(default) as u32);
                    put_u4(&mut out, *low as u32);
                    put_u4(&mut out, low.wrapping_add(targets.len() as i32 - 1) as u32);
                    for t in targets {
                        put_u4(&mut out, d(t) as u32);
                    }
                }
                Insn::LookupSwitch { default, pairs } => {
                    out.push(LOOKUPSWITCH);
                    out.resize(out.len() + pad(at), 0);
                    put_u4(&mut out, d(default) as u32);
                    put_u4(&mut out, pairs.len() as u32);
                    for (k, t) in pairs {
                        put_u4(&mut out, *k as u32);
                        put_u4(&mut out, d(t) as u32);
                    }
                }
            }
        }
        Ok(Laid::Done(out, label_off))
    }

    /// Widens a far conditional in code with stack maps without a new merge point that would
    /// need type inference: the conditional jumps to a trampoline `goto(_w) target` placed
    /// after a nearby unconditional transfer (so nothing falls into it), whose frame is a copy
    /// of the target's. Positions inside exception ranges are avoided (the copied frame need
    /// not fit the handler).
    fn add_trampoline(&mut self, jump: usize, insn_off: &[u32]) -> RawResult<()> {
        let Some(Insn::Jump { target, .. }) = self.insns.get(jump).cloned() else {
            return Err(RawError::new(0, "trampoline for a non-jump"));
        };
        let pos_of = |l: Label| self.insns.iter().position(|x| *x == Insn::Label(l));
        // The target's frame: any frame at a label in the run of labels around the target.
        let tpos = pos_of(target).ok_or_else(|| RawError::new(0, "jump to unplaced label"))?;
        let (mut a, mut b) = (tpos, tpos);
        while a > 0 && matches!(self.insns[a - 1], Insn::Label(_)) {
            a -= 1;
        }
        while b + 1 < self.insns.len() && matches!(self.insns[b + 1], Insn::Label(_)) {
            b += 1;
        }
        let run: Vec<Label> = self.insns[a..=b]
            .iter()
            .filter_map(|x| {
                if let Insn::Label(l) = x {
                    Some(*l)
                } else {
                    None
                }
            })
            .collect();
        let frame = self
            .frames()
            .and_then(|fs| fs.iter().find(|f| run.contains(&f.label)))
            .cloned()
            .ok_or_else(|| {
                RawError::new(
                    insn_off[jump] as usize,
                    "far branch target has no stack-map frame",
                )
            })?;
        let ranges: Vec<(usize, usize)> = self
            .handlers
            .iter()
            .filter_map(|h| Some((pos_of(h.start)?, pos_of(h.end)?)))
            .collect();
        let here = i64::from(insn_off[jump]);
        let unconditional = |insn: &Insn| match insn {
            Insn::Jump { op, .. } => *op == GOTO,
            Insn::Simple(op) => is_return(*op) || *op == ATHROW,
            Insn::Local { op, .. } => *op == RET,
            Insn::TableSwitch { .. } | Insn::LookupSwitch { .. } => true,
            _ => false,
        };
        let frame_labels: Vec<Label> = self
            .frames()
            .map(|fs| fs.iter().map(|f| f.label).collect())
            .unwrap_or_default();
        // Candidates: (distance, insertion index, Some(label) = first jump over the trampoline
        // to this framed label). After an unconditional transfer nothing falls into the
        // trampoline; before a framed label a `goto label` keeps fall-through off it.
        let mut best: Option<(i64, usize, Option<Label>)> = None;
        let mut prev_unconditional = false;
        for (j, insn) in self.insns.iter().enumerate() {
            let (q, over) = match insn {
                Insn::Label(_) => {
                    let starts_run = j == 0 || !matches!(self.insns[j - 1], Insn::Label(_));
                    if !starts_run || prev_unconditional {
                        continue;
                    }
                    // The frame label of this run, if any.
                    let mut k = j;
                    let mut framed = None;
                    while let Some(Insn::Label(l2)) = self.insns.get(k) {
                        if frame_labels.contains(l2) {
                            framed = Some(*l2);
                        }
                        k += 1;
                    }
                    match framed {
                        Some(fl) => (j, Some(fl)),
                        None => continue,
                    }
                }
                _ => {
                    prev_unconditional = unconditional(insn);
                    if !prev_unconditional {
                        continue;
                    }
                    (j + 1, None)
                }
            };
            if ranges.iter().any(|&(s, e)| s < q && q <= e) {
                continue;
            }
            let at = i64::from(insn_off.get(q).copied().unwrap_or_else(|| insn_off[j] + 5));
            let dist = (at - here).abs();
            // Margin for the trampolines and widenings still to come.
            if dist < 30_000 && best.is_none_or(|(d, _, _)| dist < d) {
                best = Some((dist, q, over));
            }
        }
        // Last resort, the method's start: `goto L0; trampoline; L0:` with L0's frame being the
        // implicit initial frame.
        let start_dist = here;
        let mut at_start = false;
        if start_dist < 30_000 && best.is_none_or(|(d, _, _)| start_dist < d) {
            let l0 = self.new_label();
            best = Some((start_dist, 0, Some(l0)));
            at_start = true;
        }
        let (_, q, over) = best.ok_or_else(|| {
            RawError::new(
                insn_off[jump] as usize,
                "conditional jump beyond 32 KiB with no place for a trampoline within reach",
            )
        })?;
        let tl = self.new_label();
        let mut tramp = Vec::with_capacity(3);
        if let Some(fl) = over {
            tramp.push(Insn::Jump {
                op: GOTO,
                target: fl,
            });
        }
        tramp.push(Insn::Label(tl));
        tramp.push(Insn::Jump { op: GOTO, target });
        if let (true, Some(l0)) = (at_start, over) {
            tramp.push(Insn::Label(l0));
            let initial = Frame {
                label: l0,
                locals: self.initial_locals.clone(),
                stack: vec![],
            };
            if let Some(fs) = self.frames_mut() {
                fs.push(initial);
            }
        }
        let added = tramp.len();
        self.insns.splice(q..q, tramp);
        let j = if q <= jump { jump + added } else { jump };
        if let Some(Insn::Jump { target, .. }) = self.insns.get_mut(j) {
            *target = tl;
        }
        if let Some(fs) = self.frames_mut() {
            fs.push(Frame {
                label: tl,
                locals: frame.locals,
                stack: frame.stack,
            });
        }
        Ok(())
    }
}

fn pad(at: u32) -> usize {
    ((4 - (at + 1) % 4) % 4) as usize
}

fn insn_size(insn: &Insn, at: u32, wide: bool) -> u32 {
    match insn {
        Insn::Label(_) => 0,
        Insn::Simple(_) => 1,
        Insn::Bipush(_) | Insn::NewArray(_) => 2,
        Insn::Sipush(_) | Insn::Ref { .. } => 3,
        Insn::Ldc { op, index } => {
            if *op == LDC && *index <= 255 {
                2
            } else {
                3
            }
        }
        Insn::Local { index, .. } => {
            if *index <= 255 {
                2
            } else {
                4
            }
        }
        Insn::Iinc { index, delta } => {
            if *index <= 255 && i8::try_from(*delta).is_ok() {
                3
            } else {
                6
            }
        }
        Insn::InvokeInterface { .. } | Insn::InvokeDynamic { .. } => 5,
        Insn::MultiANewArray { .. } => 4,
        Insn::Jump { op, .. } => match (wide, *op) {
            (false, _) => 3,
            (true, GOTO | JSR) => 5,
            (true, _) => 8,
        },
        Insn::TableSwitch { targets, .. } => 1 + pad(at) as u32 + 12 + 4 * targets.len() as u32,
        Insn::LookupSwitch { pairs, .. } => 1 + pad(at) as u32 + 8 + 8 * pairs.len() as u32,
    }
}

/// Decodes the code array; branch targets become labels (checked against boundaries later).
fn decode_insns(code: &[u8], base: usize, labels: &mut Labels) -> RawResult<Vec<(u32, Insn)>> {
    let mut c = Cursor::new(code, base);
    let mut out = Vec::with_capacity(code.len() / 2);
    while c.remaining() > 0 {
        let at = c.pos();
        let op = c.u1("opcode")?;
        let insn = match op {
            0x00..=0x0f
            | 0x1a..=0x35
            | 0x3b..=0x83
            | 0x85..=0x98
            | 0xac..=0xb1
            | 0xbe
            | 0xbf
            | 0xc2
            | 0xc3 => Insn::Simple(op),
            0x10 => Insn::Bipush(c.u1("bipush")? as i8),
            0x11 => Insn::Sipush(c.u2("sipush")? as i16),
            LDC => Insn::Ldc {
                op,
                index: u16::from(c.u1("ldc")?),
            },
            LDC_W | LDC2_W => Insn::Ldc {
                op,
                index: c.u2("ldc_w")?,
            },
            0x15..=0x19 | 0x36..=0x3a | RET => Insn::Local {
                op,
                index: u16::from(c.u1("local index")?),
            },
            IINC => Insn::Iinc {
                index: u16::from(c.u1("iinc")?),
                delta: i16::from(c.u1("iinc")? as i8),
            },
            0x99..=0xa8 | IFNULL | IFNONNULL => {
                let d = i32::from(c.u2("branch offset")? as i16);
                Insn::Jump {
                    op,
                    target: labels.at(rel(at, d)?),
                }
            }
            GOTO_W | JSR_W => {
                let d = c.i4("branch offset")?;
                Insn::Jump {
                    op: if op == GOTO_W { GOTO } else { JSR },
                    target: labels.at(rel(at, d)?),
                }
            }
            TABLESWITCH | LOOKUPSWITCH => {
                c.skip(pad(at as u32), "switch padding")?;
                let default = labels.at(rel(at, c.i4("switch default")?)?);
                if op == TABLESWITCH {
                    let low = c.i4("tableswitch low")?;
                    let high = c.i4("tableswitch high")?;
                    let n = i64::from(high) - i64::from(low) + 1;
                    if n < 1 || n as usize * 4 > c.remaining() {
                        return Err(
                            c.err(format!("tableswitch low {low} high {high} is impossible"))
                        );
                    }
                    let mut targets = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        targets.push(labels.at(rel(at, c.i4("tableswitch target")?)?));
                    }
                    Insn::TableSwitch {
                        default,
                        low,
                        targets,
                    }
                } else {
                    let n = c.i4("lookupswitch npairs")?;
                    if n < 0 || n as usize * 8 > c.remaining() {
                        return Err(c.err(format!("lookupswitch npairs {n} is impossible")));
                    }
                    let mut pairs = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        let k = c.i4("lookupswitch key")?;
                        pairs.push((k, labels.at(rel(at, c.i4("lookupswitch target")?)?)));
                    }
                    Insn::LookupSwitch { default, pairs }
                }
            }
            0xb2..=0xb8 | NEW | 0xbd | 0xc0 | 0xc1 => Insn::Ref {
                op,
                index: c.u2("constant index")?,
            },
            0xb9 => {
                let index = c.u2("invokeinterface")?;
                let count = c.u1("invokeinterface count")?;
                c.u1("invokeinterface zero")?;
                Insn::InvokeInterface { index, count }
            }
            0xba => {
                let index = c.u2("invokedynamic")?;
                c.u2("invokedynamic zeros")?;
                Insn::InvokeDynamic { index }
            }
            0xbc => Insn::NewArray(c.u1("newarray type")?),
            0xc5 => Insn::MultiANewArray {
                index: c.u2("multianewarray")?,
                dims: c.u1("multianewarray dims")?,
            },
            WIDE => {
                let op2 = c.u1("wide opcode")?;
                match op2 {
                    0x15..=0x19 | 0x36..=0x3a | RET => Insn::Local {
                        op: op2,
                        index: c.u2("wide index")?,
                    },
                    IINC => Insn::Iinc {
                        index: c.u2("wide iinc")?,
                        delta: c.u2("wide iinc")? as i16,
                    },
                    _ => {
                        return Err(RawError::new(
                            base + at,
                            format!("wide before opcode {op2:#04x}"),
                        ));
                    }
                }
            }
            _ => {
                return Err(RawError::new(
                    base + at,
                    format!("unknown opcode {op:#04x}"),
                ));
            }
        };
        out.push((at as u32, insn));
    }
    Ok(out)
}

fn read_line_numbers(c: &mut Cursor, labels: &mut Labels) -> RawResult<Vec<(Label, u16)>> {
    let n = c.u2("line_number_table_length")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let pc = c.u2("start_pc")?;
        v.push((labels.at(u32::from(pc)), c.u2("line_number")?));
    }
    Ok(v)
}

fn read_local_vars(c: &mut Cursor, labels: &mut Labels) -> RawResult<Vec<LocalVar>> {
    let n = c.u2("local_variable_table_length")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let start = u32::from(c.u2("start_pc")?);
        let len = u32::from(c.u2("length")?);
        v.push(LocalVar {
            start: labels.at(start),
            end: labels.at(start + len),
            name_index: c.u2("name_index")?,
            descriptor_index: c.u2("descriptor_index")?,
            index: c.u2("index")?,
        });
    }
    Ok(v)
}

fn read_vtype(
    c: &mut Cursor,
    cp: &ConstantPool,
    labels: &mut Labels,
    code: &[u8],
) -> RawResult<VType> {
    let at = c.offset();
    Ok(match c.u1("verification type")? {
        0 => VType::Top,
        1 => VType::Integer,
        2 => VType::Float,
        3 => VType::Double,
        4 => VType::Long,
        5 => VType::Null,
        6 => VType::UninitializedThis,
        7 => {
            let i = c.u2("Object_variable_info")?;
            if cp.class_name(i).is_none() {
                return Err(RawError::new(
                    at,
                    format!("frame type #{i} is not a Class constant"),
                ));
            }
            VType::Object(i)
        }
        8 => {
            let o = c.u2("Uninitialized_variable_info")?;
            if code.get(usize::from(o)) != Some(&NEW) {
                return Err(RawError::new(
                    at,
                    format!("Uninitialized({o}) does not point at a new instruction"),
                ));
            }
            VType::Uninitialized(labels.at(u32::from(o)))
        }
        t => {
            return Err(RawError::new(
                at,
                format!("unknown verification type tag {t}"),
            ));
        }
    })
}

fn read_frames(
    c: &mut Cursor,
    cp: &ConstantPool,
    labels: &mut Labels,
    initial: &[VType],
    code: &[u8],
    code_len: usize,
) -> RawResult<Vec<Frame>> {
    let n = c.u2("number_of_entries")?;
    let mut v: Vec<Frame> = Vec::with_capacity(usize::from(n));
    let mut locals: Vec<VType> = initial.to_vec();
    let mut offset: i64 = -1;
    for _ in 0..n {
        let at = c.offset();
        let t = c.u1("frame_type")?;
        let (delta, stack) = match t {
            0..=63 => (u16::from(t), vec![]),
            64..=127 => (u16::from(t - 64), vec![read_vtype(c, cp, labels, code)?]),
            247 => {
                let d = c.u2("offset_delta")?;
                (d, vec![read_vtype(c, cp, labels, code)?])
            }
            248..=250 => {
                let d = c.u2("offset_delta")?;
                let k = usize::from(251 - t);
                if k > locals.len() {
                    return Err(RawError::new(
                        at,
                        format!("chop_frame removes {k} of {} locals", locals.len()),
                    ));
                }
                locals.truncate(locals.len() - k);
                (d, vec![])
            }
            251 => (c.u2("offset_delta")?, vec![]),
            252..=254 => {
                let d = c.u2("offset_delta")?;
                for _ in 0..(t - 251) {
                    locals.push(read_vtype(c, cp, labels, code)?);
                }
                (d, vec![])
            }
            255 => {
                let d = c.u2("offset_delta")?;
                let nl = c.u2("number_of_locals")?;
                locals.clear();
                for _ in 0..nl {
                    locals.push(read_vtype(c, cp, labels, code)?);
                }
                let ns = c.u2("number_of_stack_items")?;
                let mut stack = Vec::with_capacity(usize::from(ns).min(256));
                for _ in 0..ns {
                    stack.push(read_vtype(c, cp, labels, code)?);
                }
                (d, stack)
            }
            _ => return Err(RawError::new(at, format!("reserved frame_type {t}"))),
        };
        offset = offset + 1 + i64::from(delta);
        if offset as usize >= code_len {
            return Err(RawError::new(
                at,
                format!("frame offset {offset} beyond the code"),
            ));
        }
        v.push(Frame {
            label: labels.at(offset as u32),
            locals: locals.clone(),
            stack,
        });
    }
    Ok(v)
}

fn skip_element_value(c: &mut Cursor, depth: u32) -> RawResult<()> {
    if depth > 64 {
        return Err(c.err("annotation nested too deeply"));
    }
    match c.u1("element_value tag")? {
        b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' | b's' | b'c' => {
            c.skip(2, "const_value_index")
        }
        b'e' => c.skip(4, "enum_const_value"),
        b'@' => skip_annotation(c, depth + 1),
        b'[' => {
            let n = c.u2("num_values")?;
            for _ in 0..n {
                skip_element_value(c, depth + 1)?;
            }
            Ok(())
        }
        t => Err(c.err(format!("unknown element_value tag {t}"))),
    }
}

fn skip_annotation(c: &mut Cursor, depth: u32) -> RawResult<()> {
    c.skip(2, "annotation type_index")?;
    let n = c.u2("num_element_value_pairs")?;
    for _ in 0..n {
        c.skip(2, "element_name_index")?;
        skip_element_value(c, depth)?;
    }
    Ok(())
}

fn read_type_annotations(c: &mut Cursor, labels: &mut Labels) -> RawResult<Vec<TypeAnnotation>> {
    let n = c.u2("num_annotations")?;
    let mut v = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let at = c.offset();
        let tt = c.u1("target_type")?;
        let target = match tt {
            0x40 | 0x41 => {
                let k = c.u2("table_length")?;
                let mut table = Vec::with_capacity(usize::from(k));
                for _ in 0..k {
                    let s = u32::from(c.u2("start_pc")?);
                    let l = u32::from(c.u2("length")?);
                    table.push((labels.at(s), labels.at(s + l), c.u2("index")?));
                }
                TypeTarget::LocalVar(tt, table)
            }
            0x42 => TypeTarget::Catch(c.u2("exception_table_index")?),
            0x43..=0x46 => TypeTarget::Offset(tt, labels.at(u32::from(c.u2("offset")?))),
            0x47..=0x4b => {
                let o = u32::from(c.u2("offset")?);
                TypeTarget::TypeArgument(tt, labels.at(o), c.u1("type_argument_index")?)
            }
            _ => {
                return Err(RawError::new(
                    at,
                    format!("target_type {tt:#04x} cannot appear in Code"),
                ));
            }
        };
        let rest_start = c.pos();
        let path_len = c.u1("type_path length")?;
        c.skip(usize::from(path_len) * 2, "type_path")?;
        skip_annotation(c, 0)?;
        let rest = c.data()[rest_start..c.pos()].to_vec();
        v.push(TypeAnnotation { target, rest });
    }
    Ok(v)
}

/// The implicit frame at offset 0: `this` (or `uninitializedThis` in a constructor other than
/// Object's) and the parameters, long/double as one entry each.
pub(crate) fn initial_frame(
    cp: &ConstantPool,
    this_class: u16,
    access: u16,
    name: &str,
    desc: &str,
) -> RawResult<(Vec<VType>, Placeholders)> {
    let mut v = Vec::new();
    let mut placeholders: Vec<(u16, String)> = Vec::new();
    if access & ACC_STATIC == 0 {
        let is_object = cp.class_name(this_class).as_deref() == Some("java/lang/Object");
        v.push(if name == "<init>" && !is_object {
            VType::UninitializedThis
        } else {
            VType::Object(this_class)
        });
    }
    let params = parse_params(desc)
        .ok_or_else(|| RawError::new(0, format!("bad method descriptor {desc}")))?;
    for p in params {
        v.push(match p.as_bytes()[0] {
            b'B' | b'C' | b'I' | b'S' | b'Z' => VType::Integer,
            b'F' => VType::Float,
            b'J' => VType::Long,
            b'D' => VType::Double,
            _ => {
                let n = if p.starts_with('L') {
                    &p[1..p.len() - 1]
                } else {
                    &p[..]
                };
                match cp.find_class(n) {
                    Some(i) => VType::Object(i),
                    None => {
                        // Not in the pool: a placeholder index, resolved only if a frame must
                        // spell this type out (see `Code::encode`).
                        let ph = PLACEHOLDER_BASE - placeholders.len() as u16;
                        placeholders.push((ph, n.to_string()));
                        VType::Object(ph)
                    }
                }
            }
        });
    }
    Ok((v, placeholders))
}

/// (placeholder index, class name) pairs for parameter types missing from the pool.
type Placeholders = Vec<(u16, String)>;

/// Placeholder class indices count down from here (a pool never gets this large in practice;
/// `encode` refuses if it does).
const PLACEHOLDER_BASE: u16 = 0xFFFE;

/// The parameter descriptors of a method descriptor, e.g. `(I[JLa/B;)V` → `I`, `[J`, `La/B;`.
pub fn parse_params(desc: &str) -> Option<Vec<String>> {
    let b = desc.as_bytes();
    if b.first() != Some(&b'(') {
        return None;
    }
    let mut i = 1;
    let mut v = Vec::new();
    while *b.get(i)? != b')' {
        let start = i;
        while *b.get(i)? == b'[' {
            i += 1;
        }
        match *b.get(i)? {
            b'B' | b'C' | b'D' | b'F' | b'I' | b'J' | b'S' | b'Z' => i += 1,
            b'L' => {
                while *b.get(i)? != b';' {
                    i += 1;
                }
                i += 1;
            }
            _ => return None,
        }
        v.push(desc.get(start..i)?.to_string());
    }
    Some(v)
}

impl ClassFile {
    /// Replaces method `index`'s Code attribute with `code`. On error nothing changes.
    pub fn set_code(&mut self, index: usize, code: &Code) -> Result<()> {
        let name = self.name();
        let body = code.encode(&mut self.constant_pool, &name)?;
        let Some(ai) = self
            .methods
            .get(index)
            .and_then(|m| self.find_attribute(&m.attributes, "Code"))
        else {
            return Err(Error {
                class: name,
                offset: 0,
                what: format!("method #{index} has no Code"),
            });
        };
        self.methods[index].attributes[ai].data = body;
        Ok(())
    }
}
