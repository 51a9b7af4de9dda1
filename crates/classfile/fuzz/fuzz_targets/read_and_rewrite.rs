//! Reader and rewriter on arbitrary bytes: reading, writing back (must be identical when the
//! read succeeds) and every pass must return, never panic. Seed it with real class files:
//! `cargo +nightly fuzz run read_and_rewrite corpus/ -- -max_len=65536`.
#![no_main]

use jvmprof_classfile::ClassFile;
use jvmprof_classfile::instrument::{MethodTable, Probes, instrument_class};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(cf) = ClassFile::read(data) {
        assert_eq!(cf.write(), data, "round trip must be identical");
    }
    let mut t = MethodTable::default();
    for p in [Probes::Relayout, Probes::Calls, Probes::Bytecodes, Probes::BytecodesPrecise] {
        if let Ok(o) = instrument_class(data, p, &mut t) {
            // What we write must read back.
            if let Err(e) = ClassFile::read(&o.bytes) {
                panic!("pass {p:?} wrote an unreadable class: {e}");
            }
        }
    }
});
