//! Instrumentation passes over whole classes: `none` (round trip, optionally with every method
//! re-laid out through the IR), method entry/exit probes with a try/finally wrapper for
//! exceptional exits, and per-basic-block bytecode counters (default and precise).
//!
//! Injected code is frame-neutral (it leaves the operand stack as it found it and adds no merge
//! point), so the existing frames only need relocating; the one new frame, at the exit
//! handler, is all-Top locals and `[java/lang/Throwable]` on the stack.

use crate::bba::{self, Mode};
use crate::class::{ACC_MODULE, ClassFile};
use crate::code::{Code, Frame, Handler, Insn, VType};
use crate::error::Result;
use crate::opcodes::{ATHROW, INVOKESPECIAL, INVOKESTATIC, NEW, is_return};

/// The runtime class the probes call (see `java/jvmprof/runtime/Probes.java`).
pub const RUNTIME_CLASS: &str = "jvmprof/runtime/Probes";
/// Package prefix never instrumented (the runtime itself).
pub const RUNTIME_PACKAGE: &str = "jvmprof/runtime/";

/// Which probes to insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probes {
    /// Parse and write back; the class is byte-identical.
    None,
    /// Parse every method into the IR and lay it out again (tests layout and frames).
    Relayout,
    /// `Probes.enter(id)` on entry, `Probes.exit(id)` on every normal and exceptional exit.
    Calls,
    /// `Probes.block(n)` at the start of each default basic block of `n` bytecodes.
    Bytecodes,
    /// The same with precise blocks.
    BytecodesPrecise,
}

impl std::str::FromStr for Probes {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s {
            "none" => Probes::None,
            "relayout" => Probes::Relayout,
            "calls" => Probes::Calls,
            "bytecodes" => Probes::Bytecodes,
            "bytecodes-precise" => Probes::BytecodesPrecise,
            _ => {
                return Err(format!(
                    "unknown probes '{s}' (none|relayout|calls|bytecodes|bytecodes-precise)"
                ));
            }
        })
    }
}

/// Method ids handed to `enter`/`exit`, with the names the runtime prints.
#[derive(Debug, Default, Clone)]
pub struct MethodTable {
    /// `names[id]` is `pkg.Class.method`.
    pub names: Vec<String>,
}

/// The result of instrumenting one class.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub bytes: Vec<u8>,
    /// Methods whose code was rewritten.
    pub rewritten: usize,
    /// Methods left unchanged, with the reason.
    pub skipped: Vec<String>,
}

/// Instruments one class file.
pub fn instrument_class(data: &[u8], probes: Probes, table: &mut MethodTable) -> Result<Outcome> {
    let mut cf = ClassFile::read(data)?;
    let mut out = Outcome {
        bytes: Vec::new(),
        rewritten: 0,
        skipped: Vec::new(),
    };
    let class_name = cf.name();
    if probes == Probes::None
        || cf.access & ACC_MODULE != 0
        || class_name.starts_with(RUNTIME_PACKAGE)
    {
        out.bytes = cf.write();
        return Ok(out);
    }
    for i in 0..cf.methods.len() {
        let m = &cf.methods[i];
        let mname = cf.member_name(m);
        let desc = cf.member_descriptor(m);
        let pool_len = cf.constant_pool.len();
        let result = rewrite_method(&mut cf, i, probes, table, &class_name, &mname);
        match result {
            Ok(true) => out.rewritten += 1,
            Ok(false) => {}
            Err(why) => {
                cf.constant_pool.truncate(pool_len);
                out.skipped
                    .push(format!("{class_name}.{mname}{desc}: {why}"));
            }
        }
    }
    out.bytes = cf.write();
    Ok(out)
}

fn rewrite_method(
    cf: &mut ClassFile,
    i: usize,
    probes: Probes,
    table: &mut MethodTable,
    class_name: &str,
    mname: &str,
) -> std::result::Result<bool, String> {
    let Some(mut code) = Code::read(cf, i).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    match probes {
        Probes::None | Probes::Relayout => {}
        Probes::Calls => {
            let id = table.names.len() as i32;
            add_calls(cf, &mut code, id, mname == "<init>")?;
            table
                .names
                .push(format!("{}.{}", class_name.replace('/', "."), mname));
        }
        Probes::Bytecodes => add_block_counters(cf, &mut code, Mode::Default)?,
        Probes::BytecodesPrecise => add_block_counters(cf, &mut code, Mode::Precise)?,
    }
    cf.set_code(i, &code).map_err(|e| e.what)?;
    Ok(true)
}

fn probe(cf: &mut ClassFile, name: &str, arg: i32) -> std::result::Result<Vec<Insn>, String> {
    let push = Insn::push_int(&mut cf.constant_pool, arg).map_err(|e| e.what)?;
    let index = cf
        .constant_pool
        .add_methodref(RUNTIME_CLASS, name, "(I)V")
        .map_err(|e| e.what)?;
    Ok(vec![
        push,
        Insn::Ref {
            op: INVOKESTATIC,
            index,
        },
    ])
}

/// Entry probe, exit probes before every return, and a catch-all handler at the end that calls
/// `exit` and rethrows. In a constructor everything starts after the `super()`/`this()` call,
/// since a handler may not cover code where `this` is still uninitialized.
fn add_calls(
    cf: &mut ClassFile,
    code: &mut Code,
    id: i32,
    ctor: bool,
) -> std::result::Result<(), String> {
    // java/lang/Object's constructor has no super() call: `this` starts initialized.
    let start = if ctor && cf.super_class != 0 {
        constructor_init_call(cf, code)? + 1
    } else {
        0
    };
    let returns: Vec<usize> = code
        .insns
        .iter()
        .enumerate()
        .filter(|(_, x)| matches!(x, Insn::Simple(op) if is_return(*op)))
        .map(|(i, _)| i)
        .collect();
    if returns.iter().any(|&r| r < start) {
        return Err("a return before the super()/this() call".into());
    }
    let exit = probe(cf, "exit", id)?;
    code.insert_many(returns.iter().map(|&r| (r, exit.clone())).collect());
    let hs = code.new_label();
    let he = code.new_label();
    let mut entry = probe(cf, "enter", id)?;
    entry.push(Insn::Label(hs));
    code.insns.splice(start..start, entry);
    code.insns.push(Insn::Label(he));
    code.insns.extend(probe(cf, "exit", id)?);
    code.insns.push(Insn::Simple(ATHROW));
    code.handlers.push(Handler {
        start: hs,
        end: he,
        handler: he,
        catch_type: 0,
    });
    if code.major >= 50 {
        let t = cf
            .constant_pool
            .add_class("java/lang/Throwable")
            .map_err(|e| e.what)?;
        code.add_frame(
            &mut cf.constant_pool,
            Frame {
                label: he,
                locals: vec![],
                stack: vec![VType::Object(t)],
            },
        )
        .map_err(|e| e.what)?;
    }
    code.max_stack = code
        .max_stack
        .checked_add(1)
        .ok_or("max_stack overflow")?
        .max(2);
    Ok(())
}

/// Index in `code.insns` of the `invokespecial <init>` that initializes `this`: the first one
/// not matched by an earlier `new`. Refused if control flow crosses it (then a handler after
/// it could see an uninitialized `this`).
fn constructor_init_call(cf: &ClassFile, code: &Code) -> std::result::Result<usize, String> {
    let mut pending = 0usize;
    let mut found = None;
    for (i, insn) in code.insns.iter().enumerate() {
        match insn {
            Insn::Ref { op: NEW, .. } => pending += 1,
            Insn::Ref {
                op: INVOKESPECIAL,
                index,
            } => {
                let is_init = cf
                    .constant_pool
                    .member_ref(*index)
                    .is_some_and(|(_, n, _)| n == "<init>");
                if is_init {
                    if pending == 0 {
                        found = Some(i);
                        break;
                    }
                    pending -= 1;
                }
            }
            _ => {}
        }
    }
    let p = found.ok_or("no super()/this() call found")?;
    let positions: std::collections::HashMap<_, _> = code
        .insns
        .iter()
        .enumerate()
        .filter_map(|(i, x)| {
            if let Insn::Label(l) = x {
                Some((*l, i))
            } else {
                None
            }
        })
        .collect();
    let pos_of = |l| positions.get(&l).copied().unwrap_or(usize::MAX);
    for (i, insn) in code.insns.iter().enumerate() {
        for t in insn.targets() {
            if (i < p) != (pos_of(t) <= p) {
                return Err("control flow crosses the super()/this() call".into());
            }
        }
    }
    if code.handlers.iter().any(|h| pos_of(h.start) < p) {
        return Err("an exception handler covers code before the super()/this() call".into());
    }
    Ok(p)
}

fn add_block_counters(
    cf: &mut ClassFile,
    code: &mut Code,
    mode: Mode,
) -> std::result::Result<(), String> {
    let blocks = bba::basic_blocks(code, mode);
    let mut inserts = Vec::with_capacity(blocks.len());
    for b in &blocks {
        inserts.push((b.start, probe(cf, "block", b.len as i32)?));
    }
    code.insert_many(inserts);
    code.max_stack = code.max_stack.checked_add(1).ok_or("max_stack overflow")?;
    Ok(())
}
