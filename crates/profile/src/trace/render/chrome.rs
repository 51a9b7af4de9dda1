//! `.trace.json`: the Chrome trace event format (Perfetto, `chrome://tracing`), one process per
//! VM, one track per thread, on the viewers' common timeline.

use super::escape::{json_str, json_strs};
use crate::trace::layout::{Kind, PLACEMENT_NOTE, Visit};
use crate::trace::tree::Joined;
use std::io::{self, Write};

impl Joined {
    /// The Chrome trace event format: one process per VM, one track per thread, a complete
    /// event per node on the common timeline (µs), a flow from each client to its server.
    pub fn write_chrome(&self, out: &mut impl Write) -> io::Result<()> {
        let base = self.placed_base();
        out.write_all(b"{\"traceEvents\":[")?;
        let mut first = true;
        let mut sep = |out: &mut dyn Write| -> io::Result<()> {
            if !std::mem::replace(&mut first, false) {
                out.write_all(b",")?;
            }
            out.write_all(b"\n")
        };
        for (i, v) in self.vms.iter().enumerate() {
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":",
                i + 1
            )?;
            json_str(out, &v.name, false)?;
            out.write_all(b"}}")?;
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\
                 \"args\":{{\"sort_index\":{i}}}}}",
                i + 1
            )?;
        }
        for t in &self.threads {
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":",
                t.vm + 1,
                t.id
            )?;
            json_str(out, &t.name, false)?;
            out.write_all(b"}}")?;
        }
        self.walk(|v| {
            let Visit::Open(n) = v else { return Ok(()) };
            let pid = n.vm_index + 1;
            sep(out)?;
            out.write_all(b"{\"ph\":\"X\",\"name\":")?;
            json_str(out, n.method, false)?;
            let cat = n.kind.map_or("call", Kind::as_str);
            write!(
                out,
                ",\"cat\":\"{cat}\",\"pid\":{pid},\"tid\":{},\"ts\":",
                n.thread_id
            )?;
            micros(out, n.placed_ns - base)?;
            out.write_all(b",\"dur\":")?;
            micros(out, n.duration_ns)?;
            write!(out, ",\"args\":{{\"vm_start_ns\":{}", n.start_ns)?;
            if n.unmatched {
                out.write_all(b",\"unmatched\":true")?;
            }
            if n.incomplete {
                out.write_all(b",\"incomplete\":true")?;
            }
            out.write_all(b"}}")?;
            if let (Some(call), Some(kind)) = (n.call, n.kind) {
                sep(out)?;
                let ph = match kind {
                    Kind::Client => "\"s\"",
                    Kind::Server => "\"f\",\"bp\":\"e\"",
                };
                write!(
                    out,
                    "{{\"ph\":{ph},\"id\":{call},\"name\":\"remote call\",\"cat\":\"remote\",\
                     \"pid\":{pid},\"tid\":{},\"ts\":",
                    n.thread_id
                )?;
                micros(out, n.placed_ns - base)?;
                out.write_all(b"}")?;
            }
            Ok::<(), io::Error>(())
        })?;
        out.write_all(b"\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"jvmprof trace\",\"notes\":")?;
        json_strs(
            out,
            std::iter::once(PLACEMENT_NOTE).chain(self.notes.iter().map(String::as_str)),
            false,
        )?;
        out.write_all(b"}}\n")
    }
}

/// Microseconds with three decimals, from nanoseconds, exactly.
fn micros(out: &mut impl Write, ns: i64) -> io::Result<()> {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    write!(out, "{sign}{}.{:03}", a / 1000, a % 1000)
}
