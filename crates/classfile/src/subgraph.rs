//! What root-method profiling (JFluid) needs of a class file: the methods a method's code may
//! call (read when an instrumented method first runs, to reveal its callees), the class's place
//! in the hierarchy, and the probe pass over a chosen set of methods.
//!
//! The pass is the exact mode's calling-context pass ([`crate::instrument`]) with the root
//! runtime's probes: `openRoot` in root methods, `open` elsewhere, `close` on every exit,
//! `restore` in exception handlers, bytecode counts only when asked for, and each
//! `Method.invoke` call site first hands its `Method` to `reflect` (so that a reflective
//! callee is revealed before it runs).

use crate::bba::Mode;
use crate::class::{ACC_ABSTRACT, ACC_MODULE, ACC_NATIVE, ClassFile};
use crate::code::{Code, Insn};
use crate::constant_pool::Constant;
use crate::error::Result;
use crate::instrument::{ContextProbes, Outcome, add_contexts};
use crate::opcodes::{INVOKESPECIAL, INVOKESTATIC};
use crate::rewrite;
use std::collections::HashMap;

/// The root runtime class (`java/agent/jvmprof/runtime/Roots.java`).
pub const ROOTS_CLASS: &str = "jvmprof/runtime/Roots";
/// Its context node class.
pub const ROOTS_NODE: &str = "jvmprof/runtime/Roots$Node";
/// The classes of the root runtime besides [`ROOTS_CLASS`], as prefixes of their names (nested
/// classes included), which the agent defines in the boot loader with it (in the order of its
/// embedded runtime, where `ContextNode` sorts before its subclass `Roots$Node`).
pub const ROOTS_PARTS: &[&str] = &[
    "jvmprof/runtime/Activations",
    "jvmprof/runtime/ContextNode",
    "jvmprof/runtime/RemoteSpans",
    "jvmprof/runtime/RootThread",
    "jvmprof/runtime/Roots$",
    "jvmprof/runtime/TraceRing",
    "jvmprof/runtime/TraceTrees",
];

const INVOKEVIRTUAL: u8 = 0xb6;

/// How a call site (or a method handle) reaches its callee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dispatch {
    /// `invokestatic`, `invokespecial` (private methods, constructors, `super.m()`), and
    /// method handles of those kinds: the named method, or the one the class inherits.
    Direct,
    /// `invokevirtual` / `invokeinterface`: the named method and every override of it in
    /// subclasses and implementors.
    Virtual,
}

/// A method a method's code may call.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Internal name of the class named at the call site.
    pub class: String,
    pub name: String,
    pub descriptor: String,
    pub dispatch: Dispatch,
}

/// A class's name, supertypes and methods (with code, or abstract/native).
#[derive(Debug, Clone, Default)]
pub struct Header {
    pub name: String,
    pub super_name: Option<String>,
    pub interfaces: Vec<String>,
    /// (name, descriptor, has code).
    pub methods: Vec<(String, String, bool)>,
}

/// Reads the header of a class file.
pub fn header(data: &[u8]) -> Result<Header> {
    let cf = ClassFile::read(data)?;
    Ok(header_of(&cf))
}

fn header_of(cf: &ClassFile) -> Header {
    Header {
        name: cf.name(),
        super_name: cf.super_name(),
        interfaces: cf
            .interfaces
            .iter()
            .filter_map(|i| cf.constant_pool.class_name(*i))
            .collect(),
        methods: cf
            .methods
            .iter()
            .map(|m| {
                (
                    cf.member_name(m),
                    cf.member_descriptor(m),
                    m.access & (ACC_ABSTRACT | ACC_NATIVE) == 0,
                )
            })
            .collect(),
    }
}

/// The methods method `name``descriptor` of this class may call: every invoke instruction,
/// the method handles an `invokedynamic` passes to its bootstrap method (a lambda's body, a
/// method reference) and `ldc` method-handle constants. Empty if the method has no code.
pub fn call_targets(data: &[u8], name: &str, descriptor: &str) -> Result<Vec<Target>> {
    let cf = ClassFile::read(data)?;
    let Some(index) = cf
        .methods
        .iter()
        .position(|m| cf.member_name(m) == name && cf.member_descriptor(m) == descriptor)
    else {
        return Ok(Vec::new());
    };
    method_targets(&cf, index, &bootstrap_methods(&cf))
}

/// Call targets by method: (name, descriptor) → targets.
pub type TargetsByMethod = HashMap<(String, String), Vec<Target>>;

/// [`call_targets`] of every method of a class, from one read of it: (name, descriptor) →
/// targets (methods without code have none).
pub fn all_call_targets(data: &[u8]) -> Result<TargetsByMethod> {
    let cf = ClassFile::read(data)?;
    let bootstrap = bootstrap_methods(&cf);
    let mut out = HashMap::with_capacity(cf.methods.len());
    for (i, m) in cf.methods.iter().enumerate() {
        let key = (cf.member_name(m), cf.member_descriptor(m));
        out.insert(key, method_targets(&cf, i, &bootstrap)?);
    }
    Ok(out)
}

fn method_targets(cf: &ClassFile, index: usize, bootstrap: &[Vec<u16>]) -> Result<Vec<Target>> {
    let Some(code) = Code::read(cf, index)? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<Target> = Vec::new();
    let mut push = |t: Target| {
        if !out.contains(&t) {
            out.push(t);
        }
    };
    for insn in &code.insns {
        match insn {
            Insn::Ref { op, index } if matches!(*op, INVOKESTATIC | INVOKESPECIAL) => {
                if let Some(t) = member(cf, *index, Dispatch::Direct) {
                    push(t);
                }
            }
            Insn::Ref {
                op: INVOKEVIRTUAL,
                index,
            }
            | Insn::InvokeInterface { index, .. } => {
                if let Some(t) = member(cf, *index, Dispatch::Virtual) {
                    push(t);
                }
            }
            Insn::InvokeDynamic { index } => {
                let Some(Constant::InvokeDynamic(bsm, _)) = cf.constant_pool.get(*index) else {
                    continue;
                };
                for arg in bootstrap.get(usize::from(*bsm)).into_iter().flatten() {
                    if let Some(t) = handle(cf, *arg) {
                        push(t);
                    }
                }
            }
            Insn::Ldc { index, .. } => {
                if let Some(t) = handle(cf, *index) {
                    push(t);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

fn member(cf: &ClassFile, index: u16, dispatch: Dispatch) -> Option<Target> {
    let (class, name, descriptor) = cf.constant_pool.member_ref(index)?;
    // Arrays' methods (clone) are the JVM's.
    if class.starts_with('[') {
        return None;
    }
    Some(Target {
        class,
        name,
        descriptor,
        dispatch,
    })
}

/// The method a MethodHandle constant refers to (field handles are not calls).
fn handle(cf: &ClassFile, index: u16) -> Option<Target> {
    let Some(Constant::MethodHandle(kind, reference)) = cf.constant_pool.get(index) else {
        return None;
    };
    let dispatch = match kind {
        5 | 9 => Dispatch::Virtual,
        6..=8 => Dispatch::Direct,
        _ => return None,
    };
    member(cf, *reference, dispatch)
}

/// The bootstrap arguments of each entry of the BootstrapMethods attribute.
fn bootstrap_methods(cf: &ClassFile) -> Vec<Vec<u16>> {
    let Some(at) = cf.find_attribute(&cf.attributes, "BootstrapMethods") else {
        return Vec::new();
    };
    let d = &cf.attributes[at].data;
    let u2 = |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*d.get(i)?, *d.get(i + 1)?])) };
    let mut out = Vec::new();
    let Some(n) = u2(0) else { return out };
    let mut i = 2;
    for _ in 0..n {
        let (Some(_bsm), Some(count)) = (u2(i), u2(i + 2)) else {
            break;
        };
        i += 4;
        let args: Vec<u16> = (0..usize::from(count))
            .filter_map(|k| u2(i + 2 * k))
            .collect();
        i += 2 * usize::from(count);
        out.push(args);
    }
    out
}

/// Instruments the methods `select` picks (by name and descriptor: the method id, and whether
/// the method is a root) with the root runtime's probes; the rest stay byte-for-byte as they
/// were. Methods without code are never picked.
pub fn instrument_selected(
    data: &[u8],
    bytecodes: Option<Mode>,
    mut select: impl FnMut(&str, &str) -> Option<(i32, bool)>,
) -> Result<Outcome> {
    let mut cf = ClassFile::read(data)?;
    if cf.access & ACC_MODULE != 0 {
        return Ok(rewrite::unchanged(data.to_vec()));
    }
    Ok(rewrite::rewrite_methods(
        &mut cf,
        &mut |cf, i, mname, desc, note| {
            let (id, root) = select(mname, desc)?;
            let probes = ContextProbes {
                runtime: ROOTS_CLASS,
                node: ROOTS_NODE,
                open: if root { "openRoot" } else { "open" },
                bytecodes,
                reflect: true,
                prologue: None,
            };
            let result = (|| {
                let Some(mut code) = Code::read(cf, i).map_err(|e| e.to_string())? else {
                    return Err("no code".to_string());
                };
                let n = add_contexts(cf, &mut code, id, mname == "<init>", &probes)?;
                cf.set_code(i, &code).map_err(|e| e.what)?;
                *note = n;
                Ok(true)
            })();
            Some(result)
        },
    ))
}

/// A probe trace mode puts into the JDK's remote-call code, calling static methods of the
/// root runtime with the method's arguments (passed as `Object`s).
#[derive(Debug, Clone, Copy)]
pub enum Hook<'a> {
    /// A span: `node = Roots.call(locals...)` first, `close(node, 0)` on every exit.
    Span { call: &'a str, args: &'a [u16] },
    /// A span that also replaces an argument: `arg = (class) Roots.call(arg)`, then
    /// `node = Roots.pending()`.
    SpanReplacing {
        call: &'a str,
        arg: u16,
        class: &'a str,
    },
    /// `Roots.call(locals...)` before every return (in a constructor: after its fields are set).
    BeforeReturn { call: &'a str, args: &'a [u16] },
    /// `Roots.call(this.field)` first.
    EntryField {
        call: &'a str,
        field: &'a str,
        descriptor: &'a str,
    },
}

fn object_args(n: usize) -> String {
    "Ljava/lang/Object;".repeat(n)
}

/// Puts `hooks` (method name, descriptor, probe) into a class; methods not named stay as
/// they were. The outcome lists what could not be hooked.
pub fn hook_methods(data: &[u8], hooks: &[(&str, &str, Hook)]) -> Result<Outcome> {
    let mut cf = ClassFile::read(data)?;
    Ok(rewrite::rewrite_methods(
        &mut cf,
        &mut |cf, i, mname, desc, _| {
            let (_, _, hook) = hooks.iter().find(|(n, d, _)| *n == mname && *d == desc)?;
            Some(hook_method(cf, i, hook).map(|()| true))
        },
    ))
}

const ALOAD: u8 = 0x19;
const GETFIELD: u8 = 0xb4;
const CHECKCAST: u8 = 0xc0;
const ASTORE: u8 = 0x3a;

/// Puts one hook into method `i`.
fn hook_method(cf: &mut ClassFile, i: usize, hook: &Hook) -> std::result::Result<(), String> {
    let Some(mut code) = Code::read(cf, i).map_err(|e| e.to_string())? else {
        return Err("no code".into());
    };
    let node_desc = format!("L{ROOTS_NODE};");
    match *hook {
        Hook::Span { call, args } => {
            let ret = node_desc.as_str();
            let prologue = call_with_args(cf, call, args, ret)?;
            span(cf, &mut code, prologue)?;
        }
        Hook::SpanReplacing { call, arg, class } => {
            let m = cf
                .constant_pool
                .add_methodref(ROOTS_CLASS, call, "(Ljava/lang/Object;)Ljava/lang/Object;")
                .map_err(cp_err)?;
            let c = cf.constant_pool.add_class(class).map_err(cp_err)?;
            let pending = cf
                .constant_pool
                .add_methodref(ROOTS_CLASS, "pending", &format!("(){node_desc}"))
                .map_err(cp_err)?;
            let prologue = vec![
                Insn::Local {
                    op: ALOAD,
                    index: arg,
                },
                Insn::Ref {
                    op: INVOKESTATIC,
                    index: m,
                },
                Insn::Ref {
                    op: CHECKCAST,
                    index: c,
                },
                Insn::Local {
                    op: ASTORE,
                    index: arg,
                },
                Insn::Ref {
                    op: INVOKESTATIC,
                    index: pending,
                },
            ];
            span(cf, &mut code, prologue)?;
        }
        Hook::BeforeReturn { call, args } => {
            let probe = call_with_args(cf, call, args, "V")?;
            let returns = code.return_indices();
            code.insert_many(returns.iter().map(|&r| (r, probe.clone())).collect());
            code.max_stack = code
                .max_stack
                .checked_add(args.len() as u16)
                .ok_or("max_stack overflow")?;
        }
        Hook::EntryField {
            call,
            field,
            descriptor,
        } => {
            let f = cf
                .constant_pool
                .add_fieldref(&cf.name(), field, descriptor)
                .map_err(cp_err)?;
            let m = cf
                .constant_pool
                .add_methodref(ROOTS_CLASS, call, "(Ljava/lang/Object;)V")
                .map_err(cp_err)?;
            let probe = vec![
                Insn::Local {
                    op: ALOAD,
                    index: 0,
                },
                Insn::Ref {
                    op: GETFIELD,
                    index: f,
                },
                Insn::Ref {
                    op: INVOKESTATIC,
                    index: m,
                },
            ];
            code.insns.splice(0..0, probe);
            code.max_stack = code.max_stack.checked_add(1).ok_or("max_stack overflow")?;
        }
    }
    cf.set_code(i, &code).map_err(|e| e.what)
}

fn cp_err(e: crate::error::RawError) -> String {
    e.what
}

/// `Roots.call(locals...)` with the locals passed as `Object`s, returning `ret`.
fn call_with_args(
    cf: &mut ClassFile,
    call: &str,
    args: &[u16],
    ret: &str,
) -> std::result::Result<Vec<Insn>, String> {
    let m = cf
        .constant_pool
        .add_methodref(
            ROOTS_CLASS,
            call,
            &format!("({}){ret}", object_args(args.len())),
        )
        .map_err(cp_err)?;
    let mut insns: Vec<Insn> = args
        .iter()
        .map(|&a| Insn::Local {
            op: ALOAD,
            index: a,
        })
        .collect();
    insns.push(Insn::Ref {
        op: INVOKESTATIC,
        index: m,
    });
    Ok(insns)
}

/// The calling-context pass with a custom entry (which leaves the node on the stack).
fn span(
    cf: &mut ClassFile,
    code: &mut Code,
    prologue: Vec<Insn>,
) -> std::result::Result<(), String> {
    let probes = ContextProbes {
        runtime: ROOTS_CLASS,
        node: ROOTS_NODE,
        open: "open",
        bytecodes: None,
        reflect: false,
        prologue: Some(prologue),
    };
    add_contexts(cf, code, 0, false, &probes).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_parse_of_garbage_is_empty() {
        let cf = ClassFile {
            minor: 0,
            major: 52,
            constant_pool: Default::default(),
            access: 0,
            this_class: 0,
            super_class: 0,
            interfaces: vec![],
            fields: vec![],
            methods: vec![],
            attributes: vec![],
        };
        assert!(bootstrap_methods(&cf).is_empty());
    }
}
