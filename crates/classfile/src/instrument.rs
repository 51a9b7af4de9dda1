//! Instrumentation passes over whole classes: `none` (round trip, optionally with every method
//! re-laid out through the IR), method entry/exit probes with a try/finally wrapper for
//! exceptional exits, per-basic-block bytecode counters (default and precise), and the
//! combined calling-context pass the agent's exact mode uses ([`Probes::Exact`]).
//!
//! Injected code is frame-neutral (it leaves the operand stack as it found it and adds no merge
//! point), so the existing frames only need relocating (plus new locals declared in them); the
//! one new frame is at the exit handler, with `[java/lang/Throwable]` on the stack.

use crate::bba::{self, Mode};
use crate::class::{ACC_MODULE, ClassFile};
use crate::code::{Code, Frame, Handler, Insn, Label, VType};
use crate::error::Result;
use crate::opcodes::{ATHROW, INVOKESPECIAL, INVOKESTATIC, NEW, RET, is_return};
use crate::rewrite;

/// A runtime the probes call: the class with the static probes and its context node class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runtime {
    pub class: &'static str,
    pub node: &'static str,
}

/// The agent's exact-mode runtime (`java/agent/jvmprof/runtime/Probes.java`), which has the
/// [`Probes::Exact`] probes.
pub const AGENT_RUNTIME: Runtime = Runtime {
    class: "jvmprof/runtime/Probes",
    node: "jvmprof/runtime/Probes$Node",
};

/// The runtime `jvmprof instrument` adds to what it rewrites
/// (`java/offline/jvmprof/runtime/OfflineProbes.java`), which has every pass's probes.
pub const OFFLINE_RUNTIME: Runtime = Runtime {
    class: "jvmprof/runtime/OfflineProbes",
    node: "jvmprof/runtime/OfflineProbes$Node",
};

/// Package prefix never instrumented (the runtimes themselves).
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
    /// Calling-context profiling in one pass (the agent's exact mode): the method's context node
    /// is kept in a new local (`node = Probes.open(id)`), executed bytecodes are summed per
    /// basic block in a second, `long` local (register arithmetic once compiled) and added to the
    /// node before every call (`Probes.count(node, n)`), on return and on exceptional exit
    /// (`Probes.close(node, n)`, which also makes the caller's context current again); every
    /// exception handler starts with `Probes.restore(node)`, so a frame that catches an
    /// exception is current again whatever the frames between it and the thrower did.
    Exact(Mode),
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
            "exact" => Probes::Exact(Mode::Default),
            "exact-precise" => Probes::Exact(Mode::Precise),
            _ => {
                return Err(format!(
                    "unknown probes '{s}' (none|relayout|calls|bytecodes|bytecodes-precise|exact|exact-precise)"
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

pub use crate::rewrite::Outcome;

/// Instruments one class file for the agent's runtime ([`AGENT_RUNTIME`]).
pub fn instrument_class(data: &[u8], probes: Probes, table: &mut MethodTable) -> Result<Outcome> {
    instrument_class_with(data, probes, table, AGENT_RUNTIME)
}

/// Instruments one class file with probes that call `runtime`.
pub fn instrument_class_with(
    data: &[u8],
    probes: Probes,
    table: &mut MethodTable,
    runtime: Runtime,
) -> Result<Outcome> {
    let mut cf = ClassFile::read(data)?;
    if probes == Probes::None
        || cf.access & ACC_MODULE != 0
        || cf.name().starts_with(RUNTIME_PACKAGE)
    {
        return Ok(rewrite::unchanged(cf.write()));
    }
    let mut pass = Pass {
        probes,
        runtime,
        table,
        class_name: cf.name(),
    };
    Ok(rewrite::rewrite_methods(
        &mut cf,
        &mut |cf, i, mname, _, note| Some(rewrite_method(cf, i, mname, note, &mut pass)),
    ))
}

/// One pass over one class: what to insert, calling which runtime, numbering methods in `table`.
struct Pass<'a> {
    probes: Probes,
    runtime: Runtime,
    table: &'a mut MethodTable,
    class_name: String,
}

fn rewrite_method(
    cf: &mut ClassFile,
    i: usize,
    mname: &str,
    note: &mut Option<String>,
    pass: &mut Pass,
) -> std::result::Result<bool, String> {
    let Pass {
        probes,
        runtime,
        ref mut table,
        ref class_name,
    } = *pass;
    let Some(mut code) = Code::read(cf, i).map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let name = || format!("{}.{}", class_name.replace('/', "."), mname);
    match probes {
        Probes::None | Probes::Relayout => {}
        Probes::Calls => {
            let id = table.names.len() as i32;
            add_calls(cf, &mut code, runtime, id, mname == "<init>")?;
            table.names.push(name());
        }
        Probes::Bytecodes => add_block_counters(cf, &mut code, runtime, Mode::Default)?,
        Probes::BytecodesPrecise => add_block_counters(cf, &mut code, runtime, Mode::Precise)?,
        Probes::Exact(mode) => {
            let id = table.names.len() as i32;
            let p = ContextProbes {
                runtime: runtime.class,
                node: runtime.node,
                open: "open",
                bytecodes: Some(mode),
                reflect: false,
                prologue: None,
            };
            *note = add_contexts(cf, &mut code, id, mname == "<init>", &p)?;
            table.names.push(name());
        }
    }
    cf.set_code(i, &code).map_err(|e| e.what)?;
    Ok(true)
}

fn probe(
    cf: &mut ClassFile,
    runtime: Runtime,
    name: &str,
    arg: i32,
) -> std::result::Result<Vec<Insn>, String> {
    let push = Insn::push_int(&mut cf.constant_pool, arg).map_err(|e| e.what)?;
    let index = cf
        .constant_pool
        .add_methodref(runtime.class, name, "(I)V")
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
    runtime: Runtime,
    id: i32,
    ctor: bool,
) -> std::result::Result<(), String> {
    // java/lang/Object's constructor has no super() call: `this` starts initialized.
    let start = if ctor && cf.super_class != 0 {
        constructor_init_call(cf, code)? + 1
    } else {
        0
    };
    let returns = code.return_indices();
    if returns.iter().any(|&r| r < start) {
        return Err("a return before the super()/this() call".into());
    }
    let exit = probe(cf, runtime, "exit", id)?;
    code.insert_many(returns.iter().map(|&r| (r, exit.clone())).collect());
    let hs = code.new_label();
    let he = code.new_label();
    let mut entry = probe(cf, runtime, "enter", id)?;
    entry.push(Insn::Label(hs));
    code.insns.splice(start..start, entry);
    let body = probe(cf, runtime, "exit", id)?;
    append_rethrow_handler(cf, code, he, &[(hs, he)], body, vec![])?;
    code.max_stack = code
        .max_stack
        .checked_add(1)
        .ok_or("max_stack overflow")?
        .max(2);
    Ok(())
}

/// Appends `he: body; athrow` to the code as a catch-all handler over `ranges` (last in the
/// table, so the method's own handlers come first), with its stack-map frame: `locals` (the
/// ones `body` reads; Top elsewhere) and the Throwable on the stack.
pub(crate) fn append_rethrow_handler(
    cf: &mut ClassFile,
    code: &mut Code,
    he: Label,
    ranges: &[(Label, Label)],
    body: Vec<Insn>,
    locals: Vec<VType>,
) -> std::result::Result<(), String> {
    code.insns.push(Insn::Label(he));
    code.insns.extend(body);
    code.insns.push(Insn::Simple(ATHROW));
    for &(start, end) in ranges {
        code.handlers.push(Handler {
            start,
            end,
            handler: he,
            catch_type: 0,
        });
    }
    if code.major >= 50 {
        let t = cf
            .constant_pool
            .add_class("java/lang/Throwable")
            .map_err(|e| e.what)?;
        code.add_frame(
            &mut cf.constant_pool,
            Frame {
                label: he,
                locals,
                stack: vec![VType::Object(t)],
            },
        )
        .map_err(|e| e.what)?;
    }
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
    let positions = code.label_positions();
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
    runtime: Runtime,
    mode: Mode,
) -> std::result::Result<(), String> {
    let blocks = bba::basic_blocks(code, mode);
    let mut inserts = Vec::with_capacity(blocks.len());
    for b in &blocks {
        inserts.push((b.start, probe(cf, runtime, "block", b.len as i32)?));
    }
    code.insert_many(inserts);
    code.max_stack = code.max_stack.checked_add(1).ok_or("max_stack overflow")?;
    Ok(())
}

const LCONST_0: u8 = 0x09;
const LLOAD: u8 = 0x16;
const ALOAD: u8 = 0x19;
const LSTORE: u8 = 0x37;
const ASTORE: u8 = 0x3a;
const LADD: u8 = 0x61;
const I2L: u8 = 0x85;
const INVOKEVIRTUAL: u8 = 0xb6;
const DUP_X2: u8 = 0x5b;
const DUP2_X1: u8 = 0x5d;
const POP2: u8 = 0x58;

/// What the calling-context pass calls: the exact mode's runtime, or the root-subgraph one.
#[derive(Debug, Clone)]
pub struct ContextProbes<'a> {
    /// The runtime class (`open`, `close`, `count`, `restore`, `reflect`).
    pub runtime: &'a str,
    /// Its context node class.
    pub node: &'a str,
    /// The entry probe's name (`open`; a root method's is `openRoot`).
    pub open: &'a str,
    /// Count executed bytecodes with these basic blocks, or not at all.
    pub bytecodes: Option<Mode>,
    /// Hand the `Method` of each `Method.invoke` call to `reflect` first.
    pub reflect: bool,
    /// Code that leaves the method's node on the stack, instead of `open(id)` (remote-call
    /// hooks: a runtime call with the method's arguments).
    pub prologue: Option<Vec<Insn>>,
}

/// `invokevirtual java/lang/reflect/Method.invoke(Object, Object[])`.
fn is_method_invoke(cf: &ClassFile, insn: &Insn) -> bool {
    let Insn::Ref {
        op: INVOKEVIRTUAL,
        index,
    } = insn
    else {
        return false;
    };
    cf.constant_pool
        .member_ref(*index)
        .is_some_and(|(c, n, d)| {
            c == "java/lang/reflect/Method"
                && n == "invoke"
                && d == "(Ljava/lang/Object;[Ljava/lang/Object;)Ljava/lang/Object;"
        })
}

fn is_invoke(insn: &Insn) -> bool {
    matches!(
        insn,
        Insn::Ref {
            op: INVOKEVIRTUAL | INVOKESPECIAL | INVOKESTATIC,
            ..
        } | Insn::InvokeInterface { .. }
            | Insn::InvokeDynamic { .. }
    )
}

/// The [`Probes::Exact`] pass for one method. The entry probe is the very first code, also in a
/// constructor (a static call is allowed before `super()`), so the superclass constructor is
/// the constructor's child; the catch-all exit handler starts after the `super()`/`this()` call
/// (a handler may not cover code where `this` is uninitialized). When no such point exists
/// (control flow crosses the call) the constructor gets no catch-all handler, and the returned
/// note says that an exception leaving it is closed by the frame that catches it.
pub(crate) fn add_contexts(
    cf: &mut ClassFile,
    code: &mut Code,
    id: i32,
    ctor: bool,
    p: &ContextProbes,
) -> std::result::Result<Option<String>, String> {
    let runtime = p.runtime;
    let node_class = cf.constant_pool.add_class(p.node).map_err(|x| x.what)?;
    let node_desc = format!("L{};", p.node);
    let open = cf
        .constant_pool
        .add_methodref(runtime, p.open, &format!("(I){node_desc}"))
        .map_err(|x| x.what)?;
    let close = cf
        .constant_pool
        .add_methodref(runtime, "close", &format!("({node_desc}J)V"))
        .map_err(|x| x.what)?;
    let count = cf
        .constant_pool
        .add_methodref(runtime, "count", &format!("({node_desc}J)V"))
        .map_err(|x| x.what)?;
    let restore = cf
        .constant_pool
        .add_methodref(runtime, "restore", &format!("({node_desc})V"))
        .map_err(|x| x.what)?;
    let reflect = if p.reflect {
        Some(
            cf.constant_pool
                .add_methodref(runtime, "reflect", "(Ljava/lang/reflect/Method;)V")
                .map_err(|x| x.what)?,
        )
    } else {
        None
    };
    // Where the catch-all handler starts: after super()/this() in a constructor.
    let mut note = None;
    let handler_from = if ctor && cf.super_class != 0 {
        match constructor_init_call(cf, code) {
            Ok(p) => Some(p + 1),
            Err(why) => {
                note = Some(format!(
                    "no exit handler ({why}): an exception leaving it is closed by the frame that catches it"
                ));
                None
            }
        }
    } else {
        Some(0)
    };
    let original_locals = code.max_locals;
    let blocks = match p.bytecodes {
        Some(mode) => bba::basic_blocks(code, mode),
        None => Vec::new(),
    };
    // Before any handler changes below (they refer to labels placed only later).
    let depths = monitor_depths(code);
    let counter = code.add_local(VType::Long).map_err(|x| x.what)?;
    let node = code
        .add_local(VType::Object(node_class))
        .map_err(|x| x.what)?;
    let push_node = Insn::Local {
        op: ALOAD,
        index: node,
    };
    // Without bytecode counting the counter stays 0 and is never read: `close` gets a 0.
    let push_count = match p.bytecodes {
        Some(_) => Insn::Local {
            op: LLOAD,
            index: counter,
        },
        None => Insn::Simple(LCONST_0),
    };
    let reset = [
        Insn::Simple(LCONST_0),
        Insn::Local {
            op: LSTORE,
            index: counter,
        },
    ];

    // Original code positions → code to run just before the instruction there.
    let mut inserts: std::collections::BTreeMap<usize, Vec<Insn>> = Default::default();
    let first_real = |code: &Code, label| {
        let at = code
            .insns
            .iter()
            .position(|x| matches!(x, Insn::Label(l) if *l == label))?;
        (at..code.insns.len()).find(|&i| !matches!(code.insns[i], Insn::Label(_)))
    };
    // A handler whose range starts at its own first instruction (javac's `finally`: the
    // handler's `astore` protected by itself) must not cover the probes put there: C1 refuses
    // to compile a method whose handler covers a call in itself ("exception handler covers
    // itself"), leaving it to the interpreter. Such ranges start after the probes instead.
    let handler_at: Vec<Option<(usize, bool)>> = code
        .handlers
        .iter()
        .map(|h| {
            let at = first_real(code, h.handler)?;
            Some((at, first_real(code, h.start) == Some(at)))
        })
        .collect();
    let mut self_covered: std::collections::HashMap<usize, Label> = Default::default();
    for (k, &(at, covers_itself)) in handler_at
        .iter()
        .enumerate()
        .filter_map(|(k, x)| Some((k, x.as_ref()?)))
    {
        // A handler entered with a monitor held (javac's: release it, rethrow) gets no call:
        // a call there could throw with the monitor held and no handler around it, and HotSpot
        // then calls the method's locking unbalanced and will not compile it. The exception
        // reaches a handler outside the monitor next, which restores.
        if depths.as_ref().is_some_and(|d| d[at] != Some(0)) {
            continue;
        }
        let v = inserts.entry(at).or_default();
        if v.is_empty() {
            v.extend([
                push_node.clone(),
                Insn::Ref {
                    op: INVOKESTATIC,
                    index: restore,
                },
            ]);
        }
        if covers_itself {
            let l = match self_covered.get(&at) {
                Some(l) => *l,
                None => {
                    let l = code.new_label();
                    self_covered.insert(at, l);
                    l
                }
            };
            code.handlers[k].start = l;
        }
    }
    let starts: std::collections::HashMap<usize, usize> =
        blocks.iter().map(|b| (b.start, b.len)).collect();
    // Whether the counter may be non-zero: set at each block's counter, cleared by a flush.
    // Every instruction is reached from its block's start in sequence (jump targets and
    // handlers start blocks), so a linear scan is exact.
    let mut dirty = false;
    for (i, insn) in code.insns.iter().enumerate() {
        if let Some(&len) = starts.get(&i) {
            let v = inserts.entry(i).or_default();
            v.extend([
                push_count.clone(),
                Insn::push_int(&mut cf.constant_pool, len as i32).map_err(|x| x.what)?,
                Insn::Simple(I2L),
                Insn::Simple(LADD),
                Insn::Local {
                    op: LSTORE,
                    index: counter,
                },
            ]);
            dirty = true;
        }
        // After the probes placed here (restore, block counter), also without blocks.
        if let Some(l) = self_covered.get(&i) {
            inserts.entry(i).or_default().push(Insn::Label(*l));
        }
        let returns = matches!(insn, Insn::Simple(op) if is_return(*op));
        if let Some(reflect) = reflect
            && is_method_invoke(cf, insn)
        {
            // [.., method, target, args]: a copy of the method for the runtime, the stack
            // unchanged after (dup2_x1, pop2 → [.., target, args, method]; dup_x2 →
            // [.., method, target, args, method]; the call takes the copy).
            inserts.entry(i).or_default().extend([
                Insn::Simple(DUP2_X1),
                Insn::Simple(POP2),
                Insn::Simple(DUP_X2),
                Insn::Ref {
                    op: INVOKESTATIC,
                    index: reflect,
                },
            ]);
        }
        if returns || (dirty && is_invoke(insn)) {
            let v = inserts.entry(i).or_default();
            v.extend([
                push_node.clone(),
                push_count.clone(),
                Insn::Ref {
                    op: INVOKESTATIC,
                    index: if returns { close } else { count },
                },
            ]);
            if !returns {
                v.extend(reset.clone());
            }
            dirty = false;
        }
    }
    // The catch-all handler covers the code from `handler_from` on, except where a monitor
    // entered by `monitorenter` is held: javac's own handlers release those and rethrow from
    // outside, where ours catches. Covering both kinds of code would make the lock state at
    // our handler ambiguous, and HotSpot's compilers refuse such methods ("invalid parsing",
    // "cannot parse method"), leaving them interpreted.
    let he = code.new_label();
    let mut ranges = Vec::new();
    if let Some(from) = handler_from {
        // Per instruction: Some(covered) for real instructions, None for labels.
        let inside: Vec<Option<bool>> = code
            .insns
            .iter()
            .enumerate()
            .map(|(i, insn)| {
                let held = depths.as_ref().is_some_and(|d| d[i] != Some(0));
                (!matches!(insn, Insn::Label(_))).then_some(i >= from && !held)
            })
            .collect();
        let mut open: Option<Label> = None;
        for (i, inside) in inside.into_iter().enumerate() {
            match (inside, open) {
                (Some(true), None) => {
                    let l = code.new_label();
                    open = Some(l);
                    inserts.entry(i).or_default().insert(0, Insn::Label(l));
                }
                (Some(false), Some(start)) => {
                    let l = code.new_label();
                    ranges.push((start, l));
                    open = None;
                    inserts.entry(i).or_default().insert(0, Insn::Label(l));
                }
                _ => {}
            }
        }
        if let Some(start) = open {
            ranges.push((start, he));
        }
    }
    code.insert_many(inserts.into_iter().collect());

    // The prologue goes before everything, labels included: a jump to the first instruction
    // must not run it again.
    let mut prologue = reset.to_vec();
    match &p.prologue {
        Some(code) => prologue.extend(code.iter().cloned()),
        None => prologue.extend([
            Insn::push_int(&mut cf.constant_pool, id).map_err(|x| x.what)?,
            Insn::Ref {
                op: INVOKESTATIC,
                index: open,
            },
        ]),
    }
    prologue.push(Insn::Local {
        op: ASTORE,
        index: node,
    });
    code.insns.splice(0..0, prologue);

    if !ranges.is_empty() {
        let body = vec![
            push_node,
            push_count,
            Insn::Ref {
                op: INVOKESTATIC,
                index: close,
            },
        ];
        let mut locals = vec![VType::Top; usize::from(original_locals)];
        locals.extend([VType::Long, VType::Object(node_class)]);
        append_rethrow_handler(cf, code, he, &ranges, body, locals)?;
    }
    // At most four more slots: a counter update (long + int widened to long) or the probes'
    // node and long count, over whatever the original code had there.
    code.max_stack = code.max_stack.checked_add(4).ok_or("max_stack overflow")?;
    Ok(note)
}

/// The number of monitors held (entered with `monitorenter`, not yet exited) before each
/// instruction, by data flow from the method start along jumps, fall-through and exception
/// edges; `None` for unreachable code. `None` overall when the count is not a function of the
/// position (unstructured locking) or the code uses subroutines (`jsr`/`ret`).
fn monitor_depths(code: &Code) -> Option<Vec<Option<u32>>> {
    use crate::opcodes::{GOTO, JSR, MONITORENTER, MONITOREXIT};
    let n = code.insns.len();
    let at_label = code.label_positions();
    let pos = |l: &Label| at_label.get(l).copied();
    // Handlers in table order as (first covered index, end index, handler index, catches all).
    let mut handlers = Vec::new();
    for h in &code.handlers {
        handlers.push((
            pos(&h.start)?,
            pos(&h.end)?,
            pos(&h.handler)?,
            h.catch_type == 0,
        ));
    }
    let mut depth: Vec<Option<u32>> = vec![None; n];
    let mut work = vec![(0usize, 0u32)];
    while let Some((i, d)) = work.pop() {
        if i >= n {
            continue;
        }
        match depth[i] {
            Some(seen) if seen == d => continue,
            Some(_) => return None,
            None => depth[i] = Some(d),
        }
        let insn = &code.insns[i];
        // An exception goes to the first handler that catches it: none after a catch-all.
        for &(s, e, h, all) in &handlers {
            if s <= i && i < e && !matches!(insn, Insn::Label(_)) {
                work.push((h, d));
                if all {
                    break;
                }
            }
        }
        let after = match insn {
            Insn::Simple(MONITORENTER) => d + 1,
            Insn::Simple(MONITOREXIT) => d.checked_sub(1)?,
            _ => d,
        };
        let falls_through = match insn {
            Insn::Jump { op, .. } if *op == JSR => return None,
            Insn::Local { op, .. } if *op == RET => return None,
            Insn::Jump { op, .. } => *op != GOTO,
            Insn::TableSwitch { .. } | Insn::LookupSwitch { .. } => false,
            Insn::Simple(op) => !is_return(*op) && *op != ATHROW,
            _ => true,
        };
        for t in insn.targets() {
            work.push((pos(&t)?, after));
        }
        if falls_through {
            work.push((i + 1, after));
        }
    }
    Some(depth)
}
