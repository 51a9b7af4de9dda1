//! `.json`: the joined tree as nested objects with each VM's own times, the notes and the
//! per-VM statistics.

use super::escape::{json_str, json_strs};
use crate::trace::layout::Visit;
use crate::trace::tree::Joined;
use std::io::{self, Write};

impl Joined {
    /// `{"roots": [node], "notes": [...], "stats": {vm: [row]}}`, each node
    /// `{"vm","thread","method","start_ns","duration_ns"[,"kind"][,"unmatched"][,"incomplete"],"children"}`
    /// with times on its own VM's clock.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(b"{\"roots\":[")?;
        let mut comma = false;
        self.walk(|v| {
            match v {
                Visit::Open(n) => {
                    if comma {
                        out.write_all(b",")?;
                    }
                    if n.depth == 0 {
                        out.write_all(b"\n")?;
                    }
                    out.write_all(b"{\"vm\":")?;
                    json_str(out, n.vm, false)?;
                    out.write_all(b",\"thread\":")?;
                    json_str(out, n.thread, false)?;
                    out.write_all(b",\"method\":")?;
                    json_str(out, n.method, false)?;
                    write!(
                        out,
                        ",\"start_ns\":{},\"duration_ns\":{}",
                        n.start_ns, n.duration_ns
                    )?;
                    if let Some(k) = n.kind {
                        write!(out, ",\"kind\":\"{}\"", k.as_str())?;
                    }
                    if n.unmatched {
                        out.write_all(b",\"unmatched\":true")?;
                    }
                    if n.incomplete {
                        out.write_all(b",\"incomplete\":true")?;
                    }
                    if let Some(id) = n.trace_id {
                        write!(out, ",\"trace_id\":\"{id}\"")?;
                    }
                    out.write_all(b",\"children\":[")?;
                    comma = false;
                }
                Visit::Close => {
                    out.write_all(b"]}")?;
                    comma = true;
                }
            }
            Ok::<(), io::Error>(())
        })?;
        out.write_all(b"\n],\"notes\":")?;
        json_strs(out, self.notes.iter().map(String::as_str), false)?;
        out.write_all(b",\"stats\":{")?;
        for (i, (vm, rows)) in self.stats().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"\n")?;
            json_str(out, vm, false)?;
            out.write_all(b":[")?;
            for (j, r) in rows.iter().enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(b"\n{\"method\":")?;
                json_str(out, &r.method, false)?;
                write!(
                    out,
                    ",\"count\":{},\"total_ns\":{},\"min_ns\":{},\"max_ns\":{},\"mean_ns\":{},\
                     \"stddev_ns\":{}}}",
                    r.count, r.total_ns, r.min_ns, r.max_ns, r.mean_ns, r.stddev_ns
                )?;
            }
            out.write_all(b"]")?;
        }
        out.write_all(b"}}\n")
    }
}
