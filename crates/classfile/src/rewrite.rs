//! The per-method rewrite loop every pass shares: offer each method of a class to a pass,
//! tally what it rewrote, skipped (with the reason) and noted, undo the constant-pool entries
//! of a method the pass gave up on, and write the class back.

use crate::class::ClassFile;

/// The result of instrumenting one class.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub bytes: Vec<u8>,
    /// Methods whose code was rewritten.
    pub rewritten: usize,
    /// Methods left unchanged, with the reason.
    pub skipped: Vec<String>,
    /// Methods rewritten with a caveat, with the caveat.
    pub notes: Vec<String>,
}

/// What a pass does with one method, given the class, the method's index, name and
/// descriptor, and a place for a note: `None` if the method is not the pass's (nothing is
/// said of it), `Some(Ok(true))` rewritten, `Some(Ok(false))` left as it is (no code),
/// `Some(Err(why))` skipped. A note set is reported in every case.
pub(crate) type MethodPass<'a> = dyn FnMut(
        &mut ClassFile,
        usize,
        &str,
        &str,
        &mut Option<String>,
    ) -> Option<std::result::Result<bool, String>>
    + 'a;

/// Runs `pass` over every method of `cf` in order and writes the class back. A skipped method's
/// constant-pool additions are dropped; its code was never set, so it stays as it was.
pub(crate) fn rewrite_methods(cf: &mut ClassFile, pass: &mut MethodPass<'_>) -> Outcome {
    let mut out = Outcome {
        bytes: Vec::new(),
        rewritten: 0,
        skipped: Vec::new(),
        notes: Vec::new(),
    };
    let class_name = cf.name();
    for i in 0..cf.methods.len() {
        let m = &cf.methods[i];
        let (mname, desc) = (cf.member_name(m), cf.member_descriptor(m));
        let pool_len = cf.constant_pool.len();
        let mut note = None;
        let Some(result) = pass(cf, i, &mname, &desc, &mut note) else {
            continue;
        };
        if let Some(note) = note {
            out.notes
                .push(format!("{class_name}.{mname}{desc}: {note}"));
        }
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
    out
}

/// An outcome with no method touched: the class's bytes as given.
pub(crate) fn unchanged(bytes: Vec<u8>) -> Outcome {
    Outcome {
        bytes,
        rewritten: 0,
        skipped: Vec::new(),
        notes: Vec::new(),
    }
}
