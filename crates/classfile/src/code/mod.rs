//! The label-based code IR: every code offset becomes a [`Label`] on read (branch and switch
//! targets, exception table, LineNumberTable, LocalVariable(Type)Table, StackMapTable positions,
//! `Uninitialized(offset)` and type-annotation targets), so instructions can be inserted anywhere.
//! [`Code::encode`] lays the code out again to a fixed point (switch padding, jump widening) and
//! re-encodes every frame in its most compact legal form.
//!
//! This file holds the model types and their queries; by job, `read` turns a Code attribute
//! into the IR, `edit` inserts code, frames and locals, `layout` places the instructions
//! (padding, widening, trampolines), `write` encodes the attribute and its frames, and
//! `descriptor` derives the implicit first frame from a method descriptor.

mod descriptor;
mod edit;
mod layout;
mod read;
mod write;

use std::collections::HashMap;

use crate::constant_pool::ConstantPool;
use crate::error::Result;
use crate::opcodes::*;

pub use descriptor::parse_params;

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

impl Code {
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
}

/// (placeholder index, class name) pairs for parameter types missing from the pool.
type Placeholders = Vec<(u16, String)>;

/// Placeholder class indices count down from here (a pool never gets this large in practice;
/// `encode` refuses if it does).
const PLACEHOLDER_BASE: u16 = 0xFFFE;

/// Zero bytes after a `tableswitch`/`lookupswitch` opcode at `at` (operands are 4-aligned).
fn pad(at: u32) -> usize {
    ((4 - (at + 1) % 4) % 4) as usize
}
