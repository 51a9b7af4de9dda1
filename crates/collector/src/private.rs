//! The collector's data is private: one job, to keep what lies under `--data` (command lines,
//! stacks, heap dumps, traces, call graphs) readable by this user only: directories 0700, files
//! 0600, whatever the umask and whatever an earlier run left.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Makes `dir` the collector's private data directory: created 0700 if missing; if it exists, it
/// must be a directory of this user's, and it and everything under it that group or others
/// may use is tightened (directories to 0700, files to 0600 of what the owner has), said once on
/// stderr. A directory of another user is refused.
pub fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::store::create_private_dir(dir)
                .map_err(|e| anyhow::anyhow!("cannot create --data {}: {e}", dir.display()))?;
            return Ok(());
        }
        Err(e) => anyhow::bail!("cannot use --data {}: {e}", dir.display()),
    };
    if !meta.is_dir() {
        anyhow::bail!("--data {} is not a directory", dir.display());
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        anyhow::bail!(
            "--data {} belongs to uid {}, not to this user (uid {me}): the collector keeps its \
             data in a directory of its own",
            dir.display(),
            meta.uid()
        );
    }
    let before = meta.mode() & 0o777;
    let mut tightened = 0usize;
    tighten(dir, &mut tightened)
        .map_err(|e| anyhow::anyhow!("cannot make --data {} private: {e}", dir.display()))?;
    if before & 0o077 != 0 {
        eprintln!(
            "jvmprof serve: --data {} was mode {before:04o}, open to others; tightened to 0700",
            dir.display()
        );
    }
    let inside = tightened - usize::from(before & 0o077 != 0);
    if inside > 0 {
        eprintln!(
            "jvmprof serve: {inside} files and directories under {} were open to others; \
             tightened to 0600 (directories 0700)",
            dir.display()
        );
    }
    Ok(())
}

/// Tightens `path` (not following symbolic links) and, for a directory, what it holds; counts
/// what it changed.
fn tighten(path: &Path, changed: &mut usize) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let mode = meta.mode() & 0o7777;
    let ft = meta.file_type();
    let wanted = if ft.is_dir() {
        0o700
    } else if ft.is_file() {
        mode & 0o700
    } else {
        return Ok(()); // a link or a socket: its own mode means nothing here
    };
    if mode != wanted && mode & 0o7077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted))?;
        *changed += 1;
    }
    if ft.is_dir() {
        for entry in std::fs::read_dir(path)? {
            tighten(&entry?.path(), changed)?;
        }
    }
    Ok(())
}

/// Opens `path` for writing, created with mode 0600 (an existing file keeps its mode and is
/// truncated unless `append`).
pub fn open_private(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true).mode(0o600);
    if append {
        o.append(true);
    } else {
        o.write(true).truncate(true);
    }
    o.open(path)
}

/// Writes `bytes` to `path`, created with mode 0600.
pub fn write_private(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    open_private(path, false)?.write_all(bytes.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_loose_data_directory_is_tightened_with_what_it_holds() {
        let base = std::env::temp_dir().join(format!("jvmprof-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let data = base.join("data");
        std::fs::create_dir_all(data.join("heaps")).unwrap();
        std::fs::write(data.join("jvmprof.redb"), "x").unwrap();
        std::fs::write(data.join("heaps/1.hprof"), "x").unwrap();
        std::fs::write(data.join("own"), "x").unwrap();
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        set(&data, 0o755);
        set(&data.join("heaps"), 0o775);
        set(&data.join("jvmprof.redb"), 0o644);
        set(&data.join("heaps/1.hprof"), 0o666);
        set(&data.join("own"), 0o600);
        std::os::unix::fs::symlink("/etc/hostname", data.join("link")).unwrap();
        prepare_data_dir(&data).unwrap();
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("heaps")), 0o700);
        assert_eq!(mode(&data.join("jvmprof.redb")), 0o600);
        assert_eq!(mode(&data.join("heaps/1.hprof")), 0o600);
        assert_eq!(mode(&data.join("own")), 0o600);
        // What a link points to is not ours to change.
        assert_ne!(
            std::fs::metadata("/etc/hostname").unwrap().mode() & 0o077,
            0
        );

        // Missing: created 0700 with its parents.
        let fresh = base.join("a/b");
        prepare_data_dir(&fresh).unwrap();
        assert_eq!(mode(&fresh), 0o700);

        // Another user's: refused (as root, made another user's; otherwise `/` is root's).
        let theirs = if rustix::process::geteuid().is_root() {
            let d = base.join("theirs");
            std::fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
            d
        } else {
            std::path::PathBuf::from("/")
        };
        let e = prepare_data_dir(&theirs).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("--data {} belongs to uid ", theirs.display())),
            "{e}"
        );

        // Not a directory.
        let e = prepare_data_dir(&data.join("own")).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("--data {} is not a directory", data.join("own").display())
        );

        write_private(&base.join("w"), "abc").unwrap();
        assert_eq!(mode(&base.join("w")), 0o600);
        open_private(&base.join("w"), true)
            .unwrap()
            .write_all(b"d")
            .unwrap();
        assert_eq!(std::fs::read(base.join("w")).unwrap(), b"abcd");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
