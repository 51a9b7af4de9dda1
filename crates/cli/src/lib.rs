//! Library side of the `jvmprof` command: modules that integration tests (and `main.rs`, through
//! `jvmprof_cli::...`) use. Subcommands stay in the binary.

pub mod attach;
pub mod secret;

/// The metric a `--value` option names (`None` when the option is absent).
pub fn value_metric(value: Option<&str>) -> anyhow::Result<Option<jvmprof_profile::Metric>> {
    value
        .map(|v| {
            jvmprof_profile::Metric::parse(v).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown --value '{v}' (samples, ns, calls, bytecodes, bytes, objects, \
                     live_bytes, live_objects, lock_ns, lock_count, wait_ns, wait_count, count)"
                )
            })
        })
        .transpose()
}

/// Writes `text` to stdout. A reader that went away (`report | head`) is not an error: the
/// command ends quietly, as `head` asked, instead of panicking in `print!`.
pub fn print_out(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Root sessions: formats other than the native file and the HTML page cannot carry the
/// per-method statistics, so they go to `OUTPUT.methods.txt` beside the output (said on
/// stderr). Returns that file, if written.
pub fn write_method_stats_beside(
    profile: &jvmprof_profile::Profile,
    format: jvmprof_profile::Format,
    output: &std::path::Path,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    use jvmprof_profile::Format;
    let Some(rows) = jvmprof_profile::methods::stats(profile) else {
        return Ok(None);
    };
    if matches!(format, Format::Native | Format::Html) {
        return Ok(None);
    }
    let mut name = output.as_os_str().to_owned();
    name.push(".methods.txt");
    let path = std::path::PathBuf::from(name);
    std::fs::write(&path, jvmprof_profile::methods::table(&rows, 0))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(Some(path))
}
