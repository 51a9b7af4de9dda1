//! `.html`: a self-contained page (`page.html`, no fonts, images or scripts from elsewhere)
//! with an expandable tree; the data goes in as flat columns so that neither the page's parser
//! nor its script recurse over the depth.

use super::escape::{json_str, json_strs};
use crate::trace::layout::{Kind, NodeView, PLACEMENT_NOTE, Visit};
use crate::trace::tree::Joined;
use std::io::{self, Write};

/// The page; `@DATA@` stands for the tree.
const HTML: &str = include_str!("page.html");

impl Joined {
    /// The self-contained HTML page: the tree as flat columns (pre-order, parent indices), so
    /// that neither the page's parser nor its script recurse over the depth.
    pub fn write_html(&self, out: &mut impl Write) -> io::Result<()> {
        let (head, tail) = HTML
            .split_once("@DATA@")
            .expect("the page has a data placeholder");
        out.write_all(head.as_bytes())?;
        let base = self.placed_base();
        out.write_all(b"{\"notes\":")?;
        json_strs(
            out,
            std::iter::once(PLACEMENT_NOTE).chain(self.notes.iter().map(String::as_str)),
            true,
        )?;
        out.write_all(b",\n\"vms\":")?;
        json_strs(out, self.vms.iter().map(|v| v.name.as_str()), true)?;
        out.write_all(b",\n\"threads\":")?;
        json_strs(out, self.threads.iter().map(|t| t.name.as_str()), true)?;
        out.write_all(b",\n\"threadVm\":[")?;
        for (i, t) in self.threads.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{}", t.vm)?;
        }
        out.write_all(b"],\n\"names\":")?;
        json_strs(out, self.names.iter().map(String::as_str), true)?;
        // One column per walk: the parent (pre-order index, -1 for roots), name, thread, own
        // start, duration, start on the common timeline, flags (1 client, 2 server,
        // 4 unmatched, 8 incomplete), the call tree id on a tree's root (0 elsewhere; ids stay
        // below 2^53 while thread ids stay below 2^23).
        type Column = fn(&NodeView, &Joined, i64) -> i64;
        let columns: [(&str, Option<Column>); 8] = [
            ("parent", None),
            ("name", Some(|n, _, _| n.name as i64)),
            ("thread", Some(|n, _, _| n.thread_index as i64)),
            ("start", Some(|n, _, _| n.start_ns)),
            ("dur", Some(|n, _, _| n.duration_ns)),
            ("placed", Some(|n, _, base| n.placed_ns - base)),
            (
                "flags",
                Some(|n, _, _| {
                    (match n.kind {
                        Some(Kind::Client) => 1,
                        Some(Kind::Server) => 2,
                        None => 0,
                    }) + if n.unmatched { 4 } else { 0 }
                        + if n.incomplete { 8 } else { 0 }
                }),
            ),
            ("trace", Some(|n, _, _| n.trace_id.unwrap_or(0) as i64)),
        ];
        for (name, column) in columns {
            write!(out, ",\n\"{name}\":[")?;
            let mut index = 0i64;
            let mut parents: Vec<i64> = Vec::new();
            self.walk(|v| {
                match v {
                    Visit::Open(n) => {
                        if index > 0 {
                            out.write_all(b",")?;
                        }
                        let value = match column {
                            Some(f) => f(&n, self, base),
                            None => parents.last().copied().unwrap_or(-1),
                        };
                        write!(out, "{value}")?;
                        parents.push(index);
                        index += 1;
                    }
                    Visit::Close => {
                        parents.pop();
                    }
                }
                Ok::<(), io::Error>(())
            })?;
            out.write_all(b"]")?;
        }
        out.write_all(b",\n\"stats\":[")?;
        for (i, (vm, rows)) in self.stats().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            out.write_all(b"\n{\"vm\":")?;
            json_str(out, vm, true)?;
            out.write_all(b",\"rows\":[")?;
            for (j, r) in rows.iter().enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(b"[")?;
                json_str(out, &r.method, true)?;
                write!(
                    out,
                    ",{},{},{},{},{},{}]",
                    r.count, r.total_ns, r.min_ns, r.max_ns, r.mean_ns, r.stddev_ns
                )?;
            }
            out.write_all(b"]}")?;
        }
        out.write_all(b"]}")?;
        out.write_all(tail.as_bytes())
    }
}
