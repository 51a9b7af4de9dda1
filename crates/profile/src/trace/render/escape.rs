//! JSON strings as the writers put them in their output, escaped by hand while writing (the
//! writers stream and never build a document), with `<` escaped too inside the HTML page.

use std::io::{self, Write};

/// A JSON string; with `html`, `<` as `\u003c` (so `</script>` cannot end a script element).
pub(super) fn json_str(out: &mut (impl Write + ?Sized), s: &str, html: bool) -> io::Result<()> {
    out.write_all(b"\"")?;
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            b'<' if html => Some(b"\\u003c"),
            0..=0x1f => None,
            _ => continue,
        };
        out.write_all(&bytes[from..i])?;
        match escape {
            Some(e) => out.write_all(e)?,
            None => write!(out, "\\u{b:04x}")?,
        }
        from = i + 1;
    }
    out.write_all(&bytes[from..])?;
    out.write_all(b"\"")
}

pub(super) fn json_strs<'a>(
    out: &mut (impl Write + ?Sized),
    items: impl Iterator<Item = &'a str>,
    html: bool,
) -> io::Result<()> {
    out.write_all(b"[")?;
    for (i, s) in items.enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        json_str(out, s, html)?;
    }
    out.write_all(b"]")
}
