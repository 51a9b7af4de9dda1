//! Corpus driver for scripts: `cftool roundtrip DIR`, `cftool rewrite PASS IN OUT`,
//! `cftool bench DIR`. Walks `.class` files under a directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use jvmprof_classfile::instrument::{MethodTable, Probes, instrument_class};
use jvmprof_classfile::{ClassFile, Code};

fn classes(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            classes(&p, out);
        } else if p.extension().is_some_and(|e| e == "class") {
            out.push(p);
        }
    }
}

/// Layout stress: 33,000 nops at the basic block nearest the middle of every method (that
/// stays under 64 KiB), so jumps across it must be widened.
fn stress(inp: &Path, outp: &Path) {
    // Layout stress: 33,000 nops at the basic block nearest the middle of every method
    // (that stays under 64 KiB), so jumps across it must be widened.
    let mut files = Vec::new();
    classes(inp, &mut files);
    let (mut padded, mut skipped) = (0, 0);
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let dest = outp.join(f.strip_prefix(inp).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        let Ok(mut cf) = ClassFile::read(&data) else {
            std::fs::write(&dest, &data).unwrap();
            continue;
        };
        for i in 0..cf.methods.len() {
            let Ok(Some(mut code)) = Code::read(&cf, i) else {
                continue;
            };
            let blocks =
                jvmprof_classfile::bba::basic_blocks(&code, jvmprof_classfile::bba::Mode::Default);
            if blocks.len() < 3 || code.insns.len() > 8000 {
                continue;
            }
            let mid = blocks[blocks.len() / 2].start;
            code.insert_before(mid, vec![jvmprof_classfile::Insn::Simple(0); 33_000]);
            match cf.set_code(i, &code) {
                Ok(()) => padded += 1,
                Err(e) => {
                    skipped += 1;
                    eprintln!("SKIP {}", e);
                }
            }
        }
        std::fs::write(&dest, cf.write()).unwrap();
    }
    println!(
        "classes {} methods_rewritten {padded} methods_skipped {skipped} class_errors 0",
        files.len()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cmd = args.get(1).map(String::as_str).unwrap_or("");
    match cmd {
        "roundtrip" => {
            let mut files = Vec::new();
            classes(Path::new(&args[2]), &mut files);
            let (mut same, mut differ, mut errors) = (0, 0, 0);
            for f in &files {
                let data = std::fs::read(f).unwrap();
                match ClassFile::read(&data) {
                    Ok(cf) => {
                        if cf.write() == data {
                            same += 1;
                        } else {
                            differ += 1;
                            eprintln!("DIFFER {}", f.display());
                        }
                    }
                    Err(e) => {
                        errors += 1;
                        eprintln!("ERROR {}: {e}", f.display());
                    }
                }
            }
            println!(
                "classes {} identical {same} different {differ} read_errors {errors}",
                files.len()
            );
        }
        "rewrite" if args[2] == "stress" => stress(Path::new(&args[3]), Path::new(&args[4])),
        "rewrite" => {
            let probes: Probes = args[2].parse().unwrap();
            let (inp, outp) = (Path::new(&args[3]), Path::new(&args[4]));
            let mut files = Vec::new();
            classes(inp, &mut files);
            let mut table = MethodTable::default();
            let (mut rewritten, mut skipped, mut errors) = (0, 0, 0);
            for f in &files {
                let data = std::fs::read(f).unwrap();
                let rel = f.strip_prefix(inp).unwrap();
                let dest = outp.join(rel);
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                match instrument_class(&data, probes, &mut table) {
                    Ok(o) => {
                        rewritten += o.rewritten;
                        skipped += o.skipped.len();
                        for s in &o.skipped {
                            eprintln!("SKIP {s}");
                        }
                        std::fs::write(&dest, &o.bytes).unwrap();
                    }
                    Err(e) => {
                        errors += 1;
                        eprintln!("ERROR {}: {e}", f.display());
                        std::fs::write(&dest, &data).unwrap();
                    }
                }
            }
            println!(
                "classes {} methods_rewritten {rewritten} methods_skipped {skipped} class_errors {errors}",
                files.len()
            );
        }
        "bench" => {
            let mut files = Vec::new();
            classes(Path::new(&args[2]), &mut files);
            let data: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
            let mb = data.iter().map(Vec::len).sum::<usize>() as f64 / 1e6;
            println!("corpus: {} classes, {mb:.1} MB", data.len());
            println!("{:<20} {:>12} {:>10}", "operation", "classes/s", "MB/s");
            let row = |name: &str, f: &dyn Fn(&[u8])| {
                let t = Instant::now();
                for d in &data {
                    f(d);
                }
                let s = t.elapsed().as_secs_f64();
                println!(
                    "{name:<20} {:>12.0} {:>10.1}",
                    data.len() as f64 / s,
                    mb / s
                );
            };
            row("read", &|d| {
                let _ = ClassFile::read(d);
            });
            row("read+write", &|d| {
                let _ = ClassFile::read(d).map(|c| c.write());
            });
            row("read code IR", &|d| {
                if let Ok(c) = ClassFile::read(d) {
                    for i in 0..c.methods.len() {
                        let _ = Code::read(&c, i);
                    }
                }
            });
            for p in ["relayout", "calls", "bytecodes", "bytecodes-precise"] {
                let probes: Probes = p.parse().unwrap();
                row(p, &|d| {
                    let mut t = MethodTable::default();
                    let _ = instrument_class(d, probes, &mut t);
                });
            }
        }
        "runtime" => {
            for (rel, bytes) in jvmprof_classfile::runtime::CLASSES {
                let dest = Path::new(&args[2]).join(rel);
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::write(dest, bytes).unwrap();
            }
        }
        _ => eprintln!(
            "usage: cftool roundtrip DIR | rewrite PASS IN OUT | bench DIR | runtime OUTDIR"
        ),
    }
}
