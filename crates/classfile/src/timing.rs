//! The timing pass: selected methods report how long each call took. Lock mode uses it on
//! `java.util.concurrent.locks.LockSupport`'s park methods, whose time JVMTI cannot see.
//!
//! A timed method keeps its subject (the first reference parameter of a static method, `this`
//! of an instance method, otherwise `null`) and `System.nanoTime()` in two new locals set
//! before anything else runs, and calls a static `hook(Object subject, long startNanos)` before
//! every return and in a catch-all handler that rethrows, so normal and exceptional exits are
//! both reported. The hook measures the elapsed time itself.
//!
//! As in [`crate::instrument`], the injected code is frame-neutral: existing frames only gain
//! the two locals, and the one new frame is the handler's (all-Top original locals, the two new
//! locals, `[java/lang/Throwable]` on the stack).

use crate::class::{ACC_ABSTRACT, ACC_NATIVE, ACC_STATIC, ClassFile};
use crate::code::{Code, Insn, VType, parse_params};
use crate::instrument::append_rethrow_handler;
use crate::opcodes::INVOKESTATIC;

const ACONST_NULL: u8 = 0x01;
const LLOAD: u8 = 0x16;
const ALOAD: u8 = 0x19;
const LSTORE: u8 = 0x37;
const ASTORE: u8 = 0x3a;

/// The static method every timed method calls on exit, with descriptor `(Ljava/lang/Object;J)V`.
#[derive(Debug, Clone, Copy)]
pub struct Hook<'a> {
    /// Internal name, e.g. `jvmprof/runtime/Parks`.
    pub class: &'a str,
    pub method: &'a str,
}

/// What [`time_methods`] did to a class.
#[derive(Debug, Clone)]
pub struct Timed {
    pub bytes: Vec<u8>,
    /// `name descriptor` of every method that was rewritten.
    pub methods: Vec<String>,
}

/// Rewrites the methods of a class named by `(name, descriptor)` in `wanted` so that each
/// reports its calls to `hook`. A wanted method the class lacks is ignored; one that cannot be
/// rewritten (abstract, native, a constructor, code that would grow past the limits) is an
/// error and the class is left as it was.
pub fn time_methods(data: &[u8], wanted: &[(&str, &str)], hook: Hook<'_>) -> Result<Timed, String> {
    let mut cf = ClassFile::read(data).map_err(|e| e.to_string())?;
    let mut methods = Vec::new();
    for i in 0..cf.methods.len() {
        let m = &cf.methods[i];
        let (name, desc) = (cf.member_name(m), cf.member_descriptor(m));
        if !wanted.iter().any(|(n, d)| *n == name && *d == desc) {
            continue;
        }
        time_method(&mut cf, i, hook).map_err(|why| format!("{name}{desc}: {why}"))?;
        methods.push(format!("{name} {desc}"));
    }
    Ok(Timed {
        bytes: cf.write(),
        methods,
    })
}

fn time_method(cf: &mut ClassFile, i: usize, hook: Hook<'_>) -> Result<(), String> {
    let m = &cf.methods[i];
    let (access, name, desc) = (m.access, cf.member_name(m), cf.member_descriptor(m));
    if access & (ACC_ABSTRACT | ACC_NATIVE) != 0 {
        return Err("no code to time (abstract or native)".into());
    }
    if name == "<init>" || name == "<clinit>" {
        return Err("constructors and initializers are not timed".into());
    }
    let params = parse_params(&desc).ok_or("bad descriptor")?;
    let subject = if access & ACC_STATIC == 0 {
        Some(0u16)
    } else {
        params
            .first()
            .filter(|p| p.starts_with('L') || p.starts_with('['))
            .map(|_| 0u16)
    };
    let mut code = Code::read(cf, i)
        .map_err(|e| e.to_string())?
        .ok_or("no Code attribute")?;
    let pool = &mut cf.constant_pool;
    let object = pool.add_class("java/lang/Object").map_err(|e| e.what)?;
    let nano_time = pool
        .add_methodref("java/lang/System", "nanoTime", "()J")
        .map_err(|e| e.what)?;
    let hook_ref = pool
        .add_methodref(hook.class, hook.method, "(Ljava/lang/Object;J)V")
        .map_err(|e| e.what)?;

    let original_locals = code.max_locals;
    let subject_slot = code.add_local(VType::Object(object)).map_err(|e| e.what)?;
    let start_slot = code.add_local(VType::Long).map_err(|e| e.what)?;
    let report = vec![
        Insn::Local {
            op: ALOAD,
            index: subject_slot,
        },
        Insn::Local {
            op: LLOAD,
            index: start_slot,
        },
        Insn::Ref {
            op: INVOKESTATIC,
            index: hook_ref,
        },
    ];
    let returns = code.return_indices();
    code.insert_many(returns.into_iter().map(|r| (r, report.clone())).collect());

    // The prologue goes before everything, labels included, so that a jump back to the first
    // instruction does not restart the clock.
    let (hs, he) = (code.new_label(), code.new_label());
    let load_subject = match subject {
        Some(slot) => Insn::Local {
            op: ALOAD,
            index: slot,
        },
        None => Insn::Simple(ACONST_NULL),
    };
    let prologue = vec![
        load_subject,
        Insn::Local {
            op: ASTORE,
            index: subject_slot,
        },
        Insn::Ref {
            op: INVOKESTATIC,
            index: nano_time,
        },
        Insn::Local {
            op: LSTORE,
            index: start_slot,
        },
        Insn::Label(hs),
    ];
    code.insns.splice(0..0, prologue);
    // Last in the table: the method's own handlers (a `finally` around the park) run first.
    let mut locals = vec![VType::Top; usize::from(original_locals)];
    locals.extend([VType::Object(object), VType::Long]);
    append_rethrow_handler(cf, &mut code, he, &[(hs, he)], report, locals)?;
    // The report pushes a reference and a long (three slots) over whatever a return leaves on
    // the stack, and over the Throwable in the handler.
    code.max_stack = code
        .max_stack
        .checked_add(3)
        .ok_or("max_stack overflow")?
        .max(4);
    cf.set_code(i, &code).map_err(|e| e.what)
}
