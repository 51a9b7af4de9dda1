//! `.txt`: an indented tree (method, `[vm/thread]`, duration, kind), then the statistics and
//! the notes.

use crate::trace::layout::Visit;
use crate::trace::tree::Joined;
use std::io::{self, Write};

impl Joined {
    /// An indented tree (method, `[vm/thread]`, duration, kind), then statistics and notes.
    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        const MAX_INDENT: usize = 40;
        let spaces = [b' '; 2 * MAX_INDENT];
        writeln!(
            out,
            "# jvmprof trace: {} VMs, {} roots; times on each VM's own clock",
            self.vms.len(),
            self.roots.len()
        )?;
        self.walk(|v| {
            if let Visit::Open(n) = v {
                out.write_all(&spaces[..2 * n.depth.min(MAX_INDENT)])?;
                if n.depth > MAX_INDENT {
                    write!(out, "[depth {}] ", n.depth)?;
                }
                write!(
                    out,
                    "{}  [{}/{}]  {:.3} ms",
                    n.method,
                    n.vm,
                    n.thread,
                    n.duration_ns as f64 / 1e6
                )?;
                let mut marks = Vec::new();
                if let Some(k) = n.kind {
                    marks.push(k.as_str());
                }
                if n.unmatched {
                    marks.push("unmatched");
                }
                if n.incomplete {
                    marks.push("incomplete");
                }
                if !marks.is_empty() {
                    write!(out, "  ({})", marks.join(", "))?;
                }
                if let Some(id) = n.trace_id {
                    write!(out, "  trace {id}")?;
                }
                out.write_all(b"\n")?;
            }
            Ok::<(), io::Error>(())
        })?;
        for (vm, rows) in self.stats() {
            writeln!(out, "\n## {vm}: per-method inclusive times")?;
            out.write_all(crate::methods::table(rows, 0).as_bytes())?;
        }
        if !self.notes.is_empty() {
            writeln!(out, "\n## notes")?;
            for n in &self.notes {
                writeln!(out, "- {n}")?;
            }
        }
        Ok(())
    }
}
