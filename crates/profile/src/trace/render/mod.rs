//! The writers of the joined tree, one per output format of `jvmprof trace` ([`OutputFormat`]):
//! [`json`] (the tree with each VM's own times), [`text`] (an indented tree), [`chrome`] (Chrome
//! trace / Perfetto) and [`html`] (a self-contained page, [`page.html`](html)). Each writes while
//! walking ([`Joined::walk`]), so none recurses over the depth of the tree.

use super::tree::Joined;
use std::io::{self, Write};
use std::path::Path;

mod chrome;
mod escape;
mod html;
mod json;
mod text;

#[cfg(test)]
mod tests;

/// The output formats of `jvmprof trace`, by the extension of the output file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// `.json`: the tree with each VM's own times, notes and statistics.
    Json,
    /// `.txt`: an indented tree, then the statistics and notes.
    Text,
    /// `.html`: a self-contained page with an expandable tree.
    Html,
    /// `.trace.json`: Chrome trace / Perfetto, one process per VM, one track per thread.
    ChromeTrace,
}

impl OutputFormat {
    /// The extensions, as error messages list them.
    pub const SUPPORTED: &'static str = ".json, .txt, .html, .trace.json";

    pub fn from_path(path: &Path) -> Result<OutputFormat, String> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        if name.ends_with(".trace.json") {
            Ok(OutputFormat::ChromeTrace)
        } else if name.ends_with(".json") {
            Ok(OutputFormat::Json)
        } else if name.ends_with(".txt") {
            Ok(OutputFormat::Text)
        } else if name.ends_with(".html") || name.ends_with(".htm") {
            Ok(OutputFormat::Html)
        } else {
            Err(format!(
                "cannot tell the output format of {}: the supported extensions are {}",
                path.display(),
                Self::SUPPORTED
            ))
        }
    }
}

impl Joined {
    /// Writes the joined tree in `format`.
    pub fn write(&self, format: OutputFormat, out: impl Write) -> io::Result<()> {
        let mut out = io::BufWriter::with_capacity(1 << 16, out);
        match format {
            OutputFormat::Json => self.write_json(&mut out)?,
            OutputFormat::Text => self.write_text(&mut out)?,
            OutputFormat::Html => self.write_html(&mut out)?,
            OutputFormat::ChromeTrace => self.write_chrome(&mut out)?,
        }
        out.flush()
    }
}
