//! Library side of the `jvmprof` command: modules that integration tests (and `main.rs`, through
//! `jvmprof_cli::...`) use. Subcommands stay in the binary.

pub mod attach;

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
