//! Offline instrumentation (JP's static mode): rewrite a jar, a directory of classes or one
//! class file, and add the runtime classes the probes call (plus `methods.txt`, the id → name
//! table) so that the result runs as is.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::instrument::{MethodTable, OFFLINE_RUNTIME, Probes, instrument_class_with};
use crate::runtime;

/// What an offline run did.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub classes: usize,
    pub methods_rewritten: usize,
    /// Methods left unchanged, with the reason.
    pub methods_skipped: Vec<String>,
    /// Classes copied unchanged because they could not be read, with the error.
    pub class_errors: Vec<String>,
    /// Other files copied.
    pub resources: usize,
    /// Jar signature files dropped (the signatures no longer match).
    pub signatures_dropped: usize,
}

const METHODS_TXT: &str = "jvmprof/runtime/methods.txt";

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Instruments `input` (a `.jar`/`.zip`, a directory, or a `.class` file) into `output` of the
/// same kind.
pub fn instrument_path(input: &Path, output: &Path, probes: Probes) -> std::io::Result<Summary> {
    let mut s = Summary::default();
    let mut table = MethodTable::default();
    let add_runtime = probes != Probes::None && probes != Probes::Relayout;
    if input.is_dir() {
        let mut files = Vec::new();
        walk(input, &mut files)?;
        for f in files {
            let rel = f.strip_prefix(input).map_err(io_err)?;
            let data = std::fs::read(&f)?;
            let out = if is_class(&rel.to_string_lossy()) {
                rewrite(&data, &rel.to_string_lossy(), probes, &mut table, &mut s)
            } else {
                s.resources += 1;
                data
            };
            write_file(&output.join(rel), &out)?;
        }
        if add_runtime {
            write_runtime_dir(output, &table)?;
        }
    } else if is_archive(input) {
        instrument_jar(input, output, probes, &mut table, &mut s, add_runtime)?;
    } else {
        let data = std::fs::read(input)?;
        let out = rewrite(
            &data,
            &input.display().to_string(),
            probes,
            &mut table,
            &mut s,
        );
        write_file(output, &out)?;
        if add_runtime {
            let dir = output
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            write_runtime_dir(&dir, &table)?;
        }
    }
    Ok(s)
}

fn is_class(name: &str) -> bool {
    name.ends_with(".class")
}

fn is_archive(p: &Path) -> bool {
    p.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jar") || e.eq_ignore_ascii_case("zip"))
}

fn is_signature(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    up.starts_with("META-INF/")
        && !up["META-INF/".len()..].contains('/')
        && [".SF", ".RSA", ".DSA", ".EC"]
            .iter()
            .any(|x| up.ends_with(x))
}

fn rewrite(
    data: &[u8],
    name: &str,
    probes: Probes,
    table: &mut MethodTable,
    s: &mut Summary,
) -> Vec<u8> {
    s.classes += 1;
    match instrument_class_with(data, probes, table, OFFLINE_RUNTIME) {
        Ok(o) => {
            s.methods_rewritten += o.rewritten;
            s.methods_skipped.extend(o.skipped);
            o.bytes
        }
        Err(e) => {
            s.class_errors.push(format!("{name}: {e}"));
            data.to_vec()
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

fn write_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, data)
}

fn write_runtime_dir(dir: &Path, table: &MethodTable) -> std::io::Result<()> {
    for (rel, bytes) in runtime::CLASSES {
        write_file(&dir.join(rel), bytes)?;
    }
    write_file(&dir.join(METHODS_TXT), table.names.join("\n").as_bytes())
}

fn instrument_jar(
    input: &Path,
    output: &Path,
    probes: Probes,
    table: &mut MethodTable,
    s: &mut Summary,
    add_runtime: bool,
) -> std::io::Result<()> {
    let mut zin = zip::ZipArchive::new(std::fs::File::open(input)?).map_err(io_err)?;
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut zout = zip::ZipWriter::new(std::fs::File::create(output)?);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for i in 0..zin.len() {
        let mut e = zin.by_index(i).map_err(io_err)?;
        let name = e.name().map_err(io_err)?.to_string();
        if e.is_dir() {
            zout.add_directory(name, opts).map_err(io_err)?;
            continue;
        }
        if is_signature(&name) {
            s.signatures_dropped += 1;
            continue;
        }
        if add_runtime && (name.starts_with("jvmprof/runtime/")) {
            continue; // replaced by ours below
        }
        let mut data = Vec::with_capacity(e.size() as usize);
        e.read_to_end(&mut data)?;
        let out = if is_class(&name) {
            rewrite(&data, &name, probes, table, s)
        } else {
            s.resources += 1;
            data
        };
        zout.start_file(name, opts).map_err(io_err)?;
        zout.write_all(&out)?;
    }
    if add_runtime {
        for (rel, bytes) in runtime::CLASSES {
            zout.start_file(rel.to_string(), opts).map_err(io_err)?;
            zout.write_all(bytes)?;
        }
        zout.start_file(METHODS_TXT, opts).map_err(io_err)?;
        zout.write_all(table.names.join("\n").as_bytes())?;
    }
    zout.finish().map_err(io_err)?;
    Ok(())
}
