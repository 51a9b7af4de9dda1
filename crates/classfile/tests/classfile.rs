//! Integration tests: fixtures compiled with javac, the JVM verifier as the oracle.

use std::path::{Path, PathBuf};
use std::process::Command;

use jvmprof_classfile::bba::{Mode, basic_blocks};
use jvmprof_classfile::instrument::{
    MethodTable, OFFLINE_RUNTIME, Probes, instrument_class, instrument_class_with,
};
use jvmprof_classfile::{ClassFile, Code, CodeAttrBody, Insn};

fn jdk_tool(name: &str) -> PathBuf {
    if let Some(h) = std::env::var_os("JAVA_HOME") {
        let p = Path::new(&h).join("bin").join(name);
        if p.exists() {
            return p;
        }
    }
    PathBuf::from(name)
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("classfile-tests")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles the fixtures into a fresh directory.
fn compile_fixtures(name: &str) -> PathBuf {
    let mut srcs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "java"))
        .collect();
    srcs.sort();
    compile(name, &srcs, "17")
}

fn compile(name: &str, srcs: &[PathBuf], release: &str) -> PathBuf {
    let out = scratch(name);
    let st = Command::new(jdk_tool("javac"))
        .args(["-nowarn", "--release", release, "-d"])
        .arg(&out)
        .args(srcs)
        .status()
        .expect("javac is needed by these tests");
    assert!(st.success());
    out
}

fn class_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "class"))
        .collect();
    v.sort();
    v
}

fn method_index(cf: &ClassFile, name: &str) -> usize {
    cf.methods
        .iter()
        .position(|m| cf.member_name(m) == name)
        .unwrap()
}

fn run_java(cp: &Path, main: &str, props: &[&str]) -> String {
    let out = Command::new(jdk_tool("java"))
        .args(props)
        .arg("-cp")
        .arg(cp)
        .arg(main)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "java {main} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn real_insn_count(code: &Code) -> usize {
    code.insns
        .iter()
        .filter(|i| !matches!(i, Insn::Label(_)))
        .count()
}

#[test]
fn round_trip_and_relayout_are_byte_identical_on_fixtures() {
    let dir = compile_fixtures("roundtrip");
    let files = class_files(&dir);
    assert!(
        files.len() >= 5,
        "expected the fixture classes, got {files:?}"
    );
    for f in files {
        let data = std::fs::read(&f).unwrap();
        let cf = ClassFile::read(&data).unwrap();
        assert_eq!(cf.write(), data, "{}", f.display());
        let mut t = MethodTable::default();
        let out = instrument_class(&data, Probes::Relayout, &mut t).unwrap();
        assert!(out.skipped.is_empty(), "{:?}", out.skipped);
        assert_eq!(out.bytes, data, "relayout changed {}", f.display());
    }
}

#[test]
fn truncated_or_mutated_input_gives_errors_not_panics() {
    let dir = compile_fixtures("malformed");
    let data = std::fs::read(dir.join("Workload.class")).unwrap();
    for len in 0..data.len() {
        let e = ClassFile::read(&data[..len]).unwrap_err();
        assert!(e.offset <= len, "offset {} beyond input {len}", e.offset);
        if len > data.len() * 9 / 10 {
            assert_eq!(e.class, "Workload");
        }
    }
    let e = ClassFile::read(&data[..data.len() - 1]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("class Workload: at offset"), "{msg}");
    assert!(msg.contains("truncated"), "{msg}");
    // Flip bits everywhere: reading and every pass must return, never panic.
    let mut t = MethodTable::default();
    let mut errors = 0;
    // (every third byte, alternating bits, to keep the debug-build test short; the fuzz
    // target covers the rest).
    for i in (0..data.len()).step_by(3) {
        let mut m = data.clone();
        m[i] ^= if i % 2 == 0 { 0x01 } else { 0x80 };
        let p = [Probes::Relayout, Probes::Calls, Probes::BytecodesPrecise][i % 3];
        if instrument_class(&m, p, &mut t).is_err() {
            errors += 1;
        }
    }
    assert!(errors > 0);
}

#[test]
fn jp_f_has_blocks_of_2_3_7_1_and_precise_2_3_5_2_1() {
    let dir = compile_fixtures("bba");
    let cf = ClassFile::read(&std::fs::read(dir.join("Foo.class")).unwrap()).unwrap();
    let f = Code::read(&cf, method_index(&cf, "f")).unwrap().unwrap();
    let lens = |m| {
        basic_blocks(&f, m)
            .iter()
            .map(|b| b.len)
            .collect::<Vec<_>>()
    };
    assert_eq!(lens(Mode::Default), vec![2, 3, 7, 1]);
    // invokestatic may throw: the loop body splits after it.
    assert_eq!(lens(Mode::Precise), vec![2, 3, 5, 2, 1]);

    // g (see Foo.java's javap listing): 0-1 | 2-4 | 7-13 | 16-20 | 23-30 | 31.
    let g = Code::read(&cf, method_index(&cf, "g")).unwrap().unwrap();
    let lens = |m| {
        basic_blocks(&g, m)
            .iter()
            .map(|b| b.len)
            .collect::<Vec<_>>()
    };
    assert_eq!(lens(Mode::Default), vec![2, 3, 3, 5, 4, 1]);
    // precise: invokestatic h, new, invokespecial end blocks too (athrow ends anyway).
    assert_eq!(lens(Mode::Precise), vec![2, 3, 1, 2, 5, 1, 2, 1, 1]);

    let cf = ClassFile::read(&std::fs::read(dir.join("Workload.class")).unwrap()).unwrap();
    let ts = Code::read(&cf, method_index(&cf, "tableSwitch"))
        .unwrap()
        .unwrap();
    let lens = basic_blocks(&ts, Mode::Default)
        .iter()
        .map(|b| b.len)
        .collect::<Vec<_>>();
    assert_eq!(lens, vec![2, 2, 2, 2, 2, 2]);
    let lens = basic_blocks(&ts, Mode::Precise)
        .iter()
        .map(|b| b.len)
        .collect::<Vec<_>>();
    assert_eq!(lens, vec![2, 2, 2, 2, 2, 2]);
}

/// Instruments every fixture class with `probes` into `out` (plus the runtime).
fn instrument_dir(src: &Path, out: &Path, probes: Probes) {
    let mut table = MethodTable::default();
    for f in class_files(src) {
        let data = std::fs::read(&f).unwrap();
        let o = instrument_class_with(&data, probes, &mut table, OFFLINE_RUNTIME).unwrap();
        assert!(o.skipped.is_empty(), "{:?}", o.skipped);
        std::fs::write(out.join(f.file_name().unwrap()), o.bytes).unwrap();
    }
    for (rel, bytes) in jvmprof_classfile::runtime::CLASSES {
        let p = out.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    std::fs::write(
        out.join("jvmprof/runtime/methods.txt"),
        table.names.join("\n"),
    )
    .unwrap();
}

#[test]
fn fixtures_print_the_same_under_every_pass_and_counts_are_exact() {
    let src = compile_fixtures("passes");
    let expected_workload = run_java(&src, "Workload", &[]);
    let expected_foo = run_java(&src, "Foo", &[]);
    assert_eq!(expected_foo, "h calls 55\n");
    for (name, probes) in [
        ("relayout", Probes::Relayout),
        ("calls", Probes::Calls),
        ("bytecodes", Probes::Bytecodes),
        ("precise", Probes::BytecodesPrecise),
        ("exact", Probes::Exact(Mode::Default)),
        ("exact-precise", Probes::Exact(Mode::Precise)),
    ] {
        let out = scratch(&format!("passes-{name}"));
        instrument_dir(&src, &out, probes);
        // -Xverify:all also verifies the application class path's classes strictly.
        assert_eq!(
            run_java(&out, "Workload", &["-Xverify:all"]),
            expected_workload,
            "pass {name}"
        );
        let prof = out.join("profile.txt");
        let value = if name == "calls" {
            "calls"
        } else {
            "bytecodes"
        };
        let props = [
            "-Xverify:all".to_string(),
            format!("-Djvmprof.output={}", prof.display()),
            format!("-Djvmprof.value={value}"),
        ];
        let props: Vec<&str> = props.iter().map(String::as_str).collect();
        assert_eq!(run_java(&out, "Foo", &props), expected_foo, "pass {name}");
        let profile = std::fs::read_to_string(&prof).unwrap_or_default();
        match name {
            "calls" => {
                let lines: Vec<&str> = profile.lines().collect();
                assert!(lines.contains(&"Foo.main 1"), "{profile}");
                assert!(lines.contains(&"Foo.main;Foo.f 1"), "{profile}");
                assert!(lines.contains(&"Foo.main;Foo.f;Foo.g 10"), "{profile}");
                assert!(
                    lines.contains(&"Foo.main;Foo.f;Foo.g;Foo.h 55"),
                    "{profile}"
                );
            }
            "bytecodes" | "precise" => {
                // Hand count from javap: main 6, f 2+3*11+7*10+1 = 106,
                // g(n) 2+3(n+1)+3n+5+1 summed over n=1..10 = 440, h 5*55 = 275.
                assert_eq!(profile.trim(), "[all] 827", "pass {name}");
            }
            "exact" | "exact-precise" => {
                // The same hand counts, each in its own calling context.
                let lines: Vec<&str> = profile.lines().collect();
                assert_eq!(
                    lines,
                    [
                        "Foo.main 6",
                        "Foo.main;Foo.f 106",
                        "Foo.main;Foo.f;Foo.g 440",
                        "Foo.main;Foo.f;Foo.g;Foo.h 275"
                    ],
                    "pass {name}"
                );
                let props = [
                    format!("-Djvmprof.output={}", prof.display()),
                    "-Djvmprof.value=calls".to_string(),
                ];
                let props: Vec<&str> = props.iter().map(String::as_str).collect();
                assert_eq!(run_java(&out, "Foo", &props), expected_foo, "pass {name}");
                let calls = std::fs::read_to_string(&prof).unwrap_or_default();
                let lines: Vec<&str> = calls.lines().collect();
                assert_eq!(
                    lines,
                    [
                        "Foo.main 1",
                        "Foo.main;Foo.f 1",
                        "Foo.main;Foo.f;Foo.g 10",
                        "Foo.main;Foo.f;Foo.g;Foo.h 55"
                    ],
                    "pass {name}"
                );
            }
            _ => assert_eq!(profile, ""),
        }
    }
}

#[test]
fn entry_probe_at_offset_zero_and_block_probe_at_loop_head() {
    let dir = compile_fixtures("offset0");
    let data = std::fs::read(dir.join("Foo.class")).unwrap();
    let mut t = MethodTable::default();
    let out = instrument_class(&data, Probes::Calls, &mut t).unwrap();
    let cf = ClassFile::read(&out.bytes).unwrap();
    let f = Code::read(&cf, method_index(&cf, "f")).unwrap().unwrap();
    // enter(id) is the first instruction; the loop's goto still targets the loop head (not
    // the entry probe), which now sits after it.
    let first: Vec<&Insn> = f
        .insns
        .iter()
        .filter(|i| !matches!(i, Insn::Label(_)))
        .take(2)
        .collect();
    assert!(matches!(first[1], Insn::Ref { op: 0xb8, .. }));
    assert_eq!(real_insn_count(&f), 13 + 2 + 2 + 3);

    let out = instrument_class(&data, Probes::Bytecodes, &mut t).unwrap();
    let cf = ClassFile::read(&out.bytes).unwrap();
    let f = Code::read(&cf, method_index(&cf, "f")).unwrap().unwrap();
    // The goto's target label is followed by the block probe (sipush/bipush/iconst 3, invokestatic).
    let goto_target = f.insns.iter().find_map(|i| match i {
        Insn::Jump { op: 0xa7, target } => Some(*target),
        _ => None,
    });
    let at = f
        .insns
        .iter()
        .position(|i| Some(i) == goto_target.map(Insn::Label).as_ref())
        .unwrap();
    assert_eq!(f.insns[at + 1], Insn::Simple(0x06)); // iconst_3: the loop-test block has 3 bytecodes
    assert!(matches!(f.insns[at + 2], Insn::Ref { op: 0xb8, .. }));
}

/// Inserts `n` nops before the instruction at `pos`.
fn pad_nops(code: &mut Code, pos: usize, n: usize) {
    code.insert_before(pos, vec![Insn::Simple(0); n]);
}

fn find_insn(code: &Code, pred: impl Fn(&Insn) -> bool) -> usize {
    code.insns.iter().position(pred).unwrap()
}

#[test]
fn backward_goto_widens_to_goto_w_and_verifies() {
    let dir = compile_fixtures("widen-goto");
    let path = dir.join("Shapes.class");
    let mut cf = ClassFile::read(&std::fs::read(&path).unwrap()).unwrap();
    let mi = method_index(&cf, "spin");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    let iinc = find_insn(&code, |i| matches!(i, Insn::Iinc { .. }));
    pad_nops(&mut code, iinc, 40_000);
    cf.set_code(mi, &code).unwrap();
    let bytes = cf.write();
    std::fs::write(&path, &bytes).unwrap();
    let re = ClassFile::read(&bytes).unwrap();
    let attr = &re.methods[mi].attributes[re
        .find_attribute(&re.methods[mi].attributes, "Code")
        .unwrap()];
    let len = u32::from_be_bytes(attr.data[4..8].try_into().unwrap()) as usize;
    assert_eq!(len, 15 + 40_000 + 2);
    let code_bytes = &attr.data[8..8 + len];
    assert_eq!(
        code_bytes[40_012], 0xc8,
        "goto_w expected at the end of the loop"
    );
    let back = i32::from_be_bytes(code_bytes[40_013..40_017].try_into().unwrap());
    assert_eq!(back, 2 - 40_012);
    let _ = Code::read(&re, mi).unwrap().unwrap();
    assert_eq!(
        run_java(&dir, "Shapes", &["-Xverify:all"]),
        "spin 5\nfar 1 2 71\n"
    );
}

#[test]
fn long_conditional_with_frames_uses_a_trampoline_before_a_framed_label() {
    // In Foo.f the only unconditional transfers (the loop's goto, the return) end up 40 KB
    // away; the trampoline goes before the loop head (which has a frame), behind a goto.
    let dir = compile_fixtures("widen-cond-start");
    let path = dir.join("Foo.class");
    let mut cf = ClassFile::read(&std::fs::read(&path).unwrap()).unwrap();
    let mi = method_index(&cf, "f");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    let iinc = find_insn(&code, |i| matches!(i, Insn::Iinc { .. }));
    pad_nops(&mut code, iinc, 40_000);
    cf.set_code(mi, &code).unwrap();
    std::fs::write(&path, cf.write()).unwrap();
    let m = &cf.methods[mi];
    let attr = &m.attributes[cf.find_attribute(&m.attributes, "Code").unwrap()];
    let c = &attr.data[8..];
    // 2: goto 10 (over the trampoline), 5: goto_w to the return, 10: the loop head,
    // 13: if_icmpgt back to the trampoline.
    assert_eq!(&c[0..5], &[0x04, 0x3b, 0xa7, 0x00, 0x08]);
    assert_eq!(c[5], 0xc8);
    assert_eq!(c[10], 0x1a); // iload_0
    assert_eq!(c[13], 0xa3);
    assert_eq!(i16::from_be_bytes([c[14], c[15]]), 5 - 13);
    assert_eq!(run_java(&dir, "Foo", &["-Xverify:all"]), "h calls 55\n");
}

#[test]
fn long_first_conditional_uses_a_trampoline_at_the_method_start() {
    let dir = compile_fixtures("widen-cond-at-start");
    let path = dir.join("Shapes.class");
    let mut cf = ClassFile::read(&std::fs::read(&path).unwrap()).unwrap();
    let mi = method_index(&cf, "far");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    let then = find_insn(&code, |i| *i == Insn::Bipush(70));
    pad_nops(&mut code, then, 33_000);
    cf.set_code(mi, &code).unwrap();
    std::fs::write(&path, cf.write()).unwrap();
    let m = &cf.methods[mi];
    let attr = &m.attributes[cf.find_attribute(&m.attributes, "Code").unwrap()];
    let c = &attr.data[8..];
    // 0: goto 8, 3: goto_w to the else branch, 8: the original code (a new frame at 8 is the
    // method's initial frame), 11: if_icmpne back to 3.
    assert_eq!(&c[0..3], &[0xa7, 0x00, 0x08]);
    assert_eq!(c[3], 0xc8);
    assert_eq!(&c[8..12], &[0x1a, 0x10, 0x07, 0xa0]);
    assert_eq!(i16::from_be_bytes([c[12], c[13]]), 3 - 11);
    assert_eq!(
        run_java(&dir, "Shapes", &["-Xverify:all"]),
        "spin 5\nfar 1 2 71\n"
    );
}

#[test]
fn long_conditional_with_no_trampoline_spot_in_reach_is_refused_and_method_unchanged() {
    let dir = compile_fixtures("widen-cond-refused");
    let mut cf = ClassFile::read(&std::fs::read(dir.join("Shapes.class")).unwrap()).unwrap();
    let before = cf.clone();
    let mi = method_index(&cf, "far");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    // 33,000 nops in the first then-branch, 31,000 before the first conditional: nothing
    // the conditional could jump to is within reach.
    let then = find_insn(&code, |i| *i == Insn::Bipush(70));
    pad_nops(&mut code, then, 33_000);
    pad_nops(&mut code, 0, 31_000);
    let e = cf.set_code(mi, &code).unwrap_err();
    assert!(e.what.contains("no place for a trampoline"), "{e}");
    assert_eq!(e.class, "Shapes");
    assert_eq!(cf.methods, before.methods);
}

#[test]
fn long_conditional_with_frames_jumps_to_a_trampoline_after_an_earlier_goto() {
    let dir = compile_fixtures("widen-trampoline");
    let path = dir.join("Shapes.class");
    let mut cf = ClassFile::read(&std::fs::read(&path).unwrap()).unwrap();
    let mi = method_index(&cf, "far");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    let frames = code.frames().unwrap().len();
    let iinc = find_insn(&code, |i| matches!(i, Insn::Iinc { delta: 1, .. }));
    pad_nops(&mut code, iinc, 40_000);
    cf.set_code(mi, &code).unwrap();
    std::fs::write(&path, cf.write()).unwrap();
    let attr = &cf.methods[mi].attributes[cf
        .find_attribute(&cf.methods[mi].attributes, "Code")
        .unwrap()];
    let c = &attr.data[8..];
    // Nearest spot: before the join label at 14, behind `goto 14'`:
    // 14: goto 22, 17: goto_w to the else branch, 22: iload_0, 23: ifle back to 17.
    assert_eq!(&c[14..17], &[0xa7, 0x00, 0x08]);
    assert_eq!(c[17], 0xc8);
    assert_eq!(&c[22..24], &[0x1a, 0x9e]);
    assert_eq!(i16::from_be_bytes([c[24], c[25]]), 17 - 23);
    let re = Code::read(&cf, mi).unwrap().unwrap();
    assert_eq!(re.frames().unwrap().len(), frames + 1);
    assert_eq!(
        run_java(&dir, "Shapes", &["-Xverify:all"]),
        "spin 5\nfar 1 2 71\n"
    );
}

#[test]
fn long_conditional_without_frames_is_inverted_over_goto_w() {
    // Release 8: string concatenation without invokedynamic, so version 49 is legal.
    let dir = compile("widen-cond-old", &[fixtures_dir().join("Foo.java")], "8");
    let path = dir.join("Foo.class");
    let mut cf = ClassFile::read(&std::fs::read(&path).unwrap()).unwrap();
    // Make it an old (version 49) class: no stack maps, the type-inferencing verifier.
    cf.major = 49;
    for mi in 0..cf.methods.len() {
        if let Some(mut code) = Code::read(&cf, mi).unwrap() {
            code.attributes
                .retain(|a| !matches!(a.body, CodeAttrBody::StackMap(_)));
            code.major = 49;
            if cf.member_name(&cf.methods[mi]) == "f" {
                let iinc = find_insn(&code, |i| matches!(i, Insn::Iinc { .. }));
                pad_nops(&mut code, iinc, 40_000);
            }
            cf.set_code(mi, &code).unwrap();
        }
    }
    let bytes = cf.write();
    std::fs::write(&path, &bytes).unwrap();
    let mi = method_index(&cf, "f");
    let attr = &cf.methods[mi].attributes[cf
        .find_attribute(&cf.methods[mi].attributes, "Code")
        .unwrap()];
    let code = &attr.data[8..];
    // 5: if_icmpgt became if_icmple +8 over goto_w to the return.
    assert_eq!(&code[5..8], &[0xa4, 0x00, 0x08]);
    assert_eq!(code[8], 0xc8);
    assert_eq!(run_java(&dir, "Foo", &["-Xverify:all"]), "h calls 55\n");
}

#[test]
fn code_over_64k_is_an_error_and_leaves_the_method_unchanged() {
    let dir = compile_fixtures("too-big");
    let mut cf = ClassFile::read(&std::fs::read(dir.join("Shapes.class")).unwrap()).unwrap();
    let before = cf.clone();
    let mi = method_index(&cf, "spin");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    pad_nops(&mut code, 0, 70_000);
    let e = cf.set_code(mi, &code).unwrap_err();
    assert!(e.what.contains("65535-byte limit"), "{e}");
    assert_eq!(cf.methods, before.methods);
    assert_eq!(cf.write(), before.write());
}

#[test]
fn frames_are_relocated_and_reencoded_compactly() {
    let dir = compile_fixtures("frames");
    let mut cf = ClassFile::read(&std::fs::read(dir.join("Workload.class")).unwrap()).unwrap();
    let mi = method_index(&cf, "tableSwitch");
    let mut code = Code::read(&cf, mi).unwrap().unwrap();
    let frames_before = code.frames_mut().unwrap().clone();
    assert_eq!(frames_before.len(), 5);
    // 70 nops at offset 0 push the first frame's delta past 63: same_frame_extended (251).
    pad_nops(&mut code, 0, 70);
    cf.set_code(mi, &code).unwrap();
    let m = &cf.methods[mi];
    let attr = &m.attributes[cf.find_attribute(&m.attributes, "Code").unwrap()];
    let smt = {
        let cf2 = cf.clone();
        let c = Code::read(&cf2, mi).unwrap().unwrap();
        assert_eq!(c.frames().unwrap().clone(), frames_before);
        attr.data.clone()
    };
    // Find the StackMapTable body: number_of_entries 5, then frame 251 with delta 70+32+pad.
    let pos = smt
        .windows(3)
        .position(|w| w == [0x00, 0x05, 251])
        .expect("same_frame_extended");
    let delta = u16::from_be_bytes([smt[pos + 3], smt[pos + 4]]);
    // tableswitch at 71 is padded to 4 bytes: 1 + 0 pad... first case target = 70 + 32 (+pad change).
    assert!(delta > 63, "delta {delta}");
    // The following frames keep their short same_frame form (delta 2 < 64).
    assert_eq!(smt[pos + 5], 2);
}

#[test]
fn offline_jar_dir_and_class_outputs_run_with_the_runtime_inside() {
    use jvmprof_classfile::offline::instrument_path;
    let src = compile_fixtures("offline");
    let work = scratch("offline-work");
    let jar = work.join("in.jar");
    let st = Command::new(jdk_tool("jar"))
        .arg("cf")
        .arg(&jar)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .status()
        .unwrap();
    assert!(st.success());
    let expected = run_java(&src, "Foo", &[]);

    let out_jar = work.join("out.jar");
    let s = instrument_path(&jar, &out_jar, Probes::Calls).unwrap();
    assert_eq!(
        (s.classes, s.class_errors.len(), s.methods_skipped.len()),
        (6, 0, 0)
    );
    let prof = work.join("jar.txt");
    let p = format!("-Djvmprof.output={}", prof.display());
    assert_eq!(run_java(&out_jar, "Foo", &[&p]), expected);
    assert!(
        std::fs::read_to_string(&prof)
            .unwrap()
            .contains("Foo.main;Foo.f;Foo.g;Foo.h 55\n")
    );

    let out_dir = work.join("out-dir");
    instrument_path(&src, &out_dir, Probes::Bytecodes).unwrap();
    let prof = work.join("dir.txt");
    let p = format!("-Djvmprof.output={}", prof.display());
    assert_eq!(
        run_java(&out_dir, "Foo", &[&p, "-Djvmprof.value=bytecodes"]),
        expected
    );
    assert_eq!(std::fs::read_to_string(&prof).unwrap(), "[all] 827\n");

    let out_class = work.join("single/Foo.class");
    let s = instrument_path(&src.join("Foo.class"), &out_class, Probes::BytecodesPrecise).unwrap();
    assert_eq!(s.classes, 1);
    let prof = work.join("class.txt");
    let p = format!("-Djvmprof.output={}", prof.display());
    assert_eq!(
        run_java(
            &work.join("single"),
            "Foo",
            &[&p, "-Djvmprof.value=bytecodes"]
        ),
        expected
    );
    assert_eq!(std::fs::read_to_string(&prof).unwrap(), "[all] 827\n");

    // none: the jar's classes come back byte-identical and no runtime is added.
    let none = work.join("none.jar");
    let s = instrument_path(&jar, &none, Probes::None).unwrap();
    assert_eq!(s.methods_rewritten, 0);
    assert_eq!(run_java(&none, "Foo", &[]), expected);
}

#[test]
fn a_new_local_is_declared_in_every_frame() {
    let dir = compile_fixtures("new-local");
    let path = dir.join("Foo.class");
    let data = std::fs::read(&path).unwrap();
    let edit = |declare: bool| {
        let mut cf = ClassFile::read(&data).unwrap();
        let mi = method_index(&cf, "f");
        let mut code = Code::read(&cf, mi).unwrap().unwrap();
        let slot = if declare {
            code.add_local(jvmprof_classfile::VType::Integer).unwrap()
        } else {
            code.max_locals += 1;
            code.max_locals - 1
        };
        assert_eq!(slot, 1);
        // Store at entry; load it at the return, after the loop's merge points.
        code.insns.splice(
            0..0,
            [
                Insn::Bipush(42),
                Insn::Local {
                    op: 0x36,
                    index: slot,
                },
            ],
        );
        let ret = find_insn(&code, |i| *i == Insn::Simple(0xb1));
        code.insert_before(
            ret,
            vec![
                Insn::Local {
                    op: 0x15,
                    index: slot,
                },
                Insn::Simple(0x57),
            ],
        );
        cf.set_code(mi, &code).unwrap();
        std::fs::write(&path, cf.write()).unwrap();
    };
    edit(true);
    assert_eq!(run_java(&dir, "Foo", &["-Xverify:all"]), "h calls 55\n");
    // Control: the same code without declaring the local in the frames fails verification.
    edit(false);
    let out = Command::new(jdk_tool("java"))
        .args(["-Xverify:all", "-cp"])
        .arg(&dir)
        .arg("Foo")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("VerifyError"));
}

/// The exact pass must leave methods compilable: HotSpot's C1 and C2 give up on a method whose
/// exception handlers cover themselves with a call in them, or whose handler is reached with
/// different monitors held ("COMPILE SKIPPED"), and such a method then runs interpreted.
#[test]
fn exact_pass_leaves_synchronized_and_finally_methods_compilable() {
    let src = compile_fixtures("compilable");
    let expected = run_java(&src, "Compiled", &[]);
    for (name, mode) in [("exact", Mode::Default), ("exact-precise", Mode::Precise)] {
        let out = scratch(&format!("compilable-{name}"));
        instrument_dir(&src, &out, Probes::Exact(mode));
        let printed = run_java(
            &out,
            "Compiled",
            &["-Xbatch", "-XX:+PrintCompilation", "-Xverify:all"],
        );
        assert!(
            printed.lines().any(|l| l == expected.trim()),
            "{name}: {printed}"
        );
        let skipped: Vec<&str> = printed
            .lines()
            .filter(|l| l.contains("Compiled::") && l.contains("COMPILE SKIPPED"))
            .collect();
        assert!(skipped.is_empty(), "{name}: {skipped:#?}");
        for m in ["syncBlock", "withFinally", "syncInFinally", "catchInLoop"] {
            let c2 = printed.lines().any(|l| {
                l.contains(&format!("Compiled::{m} "))
                    && l.split_whitespace().any(|w| w == "4")
                    && !l.contains("made not entrant")
            });
            assert!(c2, "{name}: {m} never compiled by C2:\n{printed}");
        }
    }
}

#[test]
fn call_targets_name_every_kind_of_call_site() {
    use jvmprof_classfile::subgraph::{Dispatch, call_targets, header};
    // Its own directory: the other tests count the fixture classes.
    let dir = compile(
        "targets",
        &[fixtures_dir().join("targets/Targets.java")],
        "17",
    );
    let data = std::fs::read(dir.join("Targets.class")).unwrap();
    let h = header(&data).unwrap();
    assert_eq!(h.name, "Targets");
    assert_eq!(h.super_name.as_deref(), Some("Base"));
    assert_eq!(h.interfaces, vec!["java/lang/Runnable".to_string()]);
    assert!(
        h.methods
            .iter()
            .any(|(n, d, code)| n == "all" && d.starts_with("(LTargets$Shape;") && *code)
    );
    let all = h.methods.iter().find(|m| m.0 == "all").unwrap().1.clone();
    let targets = call_targets(&data, "all", &all).unwrap();
    let has = |class: &str, name: &str, dispatch: Dispatch| {
        targets
            .iter()
            .any(|t| t.class == class && t.name == name && t.dispatch == dispatch)
    };
    assert!(has("Targets", "helper", Dispatch::Direct), "{targets:?}");
    // javac 11+ calls a private method with invokevirtual (nestmates): resolved upwards only.
    assert!(
        has("Targets", "secret", Dispatch::Virtual) || has("Targets", "secret", Dispatch::Direct),
        "{targets:?}"
    );
    assert!(
        has("Targets$Shape", "area", Dispatch::Virtual),
        "{targets:?}"
    );
    assert!(has("Base", "base", Dispatch::Virtual), "{targets:?}");
    assert!(
        has("Base", "base", Dispatch::Direct),
        "super.base(): {targets:?}"
    );
    assert!(
        targets
            .iter()
            .any(|t| t.class == "Targets" && t.name.starts_with("lambda$all$")),
        "lambda body: {targets:?}"
    );
    assert!(
        has("Targets", "run", Dispatch::Virtual),
        "this::run: {targets:?}"
    );
    assert!(
        has("java/lang/reflect/Method", "invoke", Dispatch::Virtual),
        "{targets:?}"
    );
    assert!(
        !targets.iter().any(|t| t.name == "clone"),
        "array clone is no target: {targets:?}"
    );
    // Each target once.
    let mut seen = std::collections::HashSet::new();
    assert!(targets.iter().all(|t| seen.insert(t.clone())));
    // One read of the class gives every method's targets, the same ones.
    let all_methods = jvmprof_classfile::subgraph::all_call_targets(&data).unwrap();
    assert_eq!(all_methods[&("all".to_string(), all.clone())], targets);
    assert_eq!(all_methods.len(), h.methods.len());
    assert!(call_targets(&data, "nosuch", "()V").unwrap().is_empty());
    assert!(call_targets(b"\xca\xfe\xba\xbe\0", "all", &all).is_err());
}
