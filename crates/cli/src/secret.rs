//! Tokens without a trace: one job, to find a collector token where it is not on display (a file,
//! the environment) rather than on the command line, where `ps` shows it to every local user.

use anyhow::{Context, Result, bail};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The environment variable that holds the collector token.
pub const TOKEN_ENV: &str = "JVMPROF_TOKEN";

/// The token to use: from `file` (`--token-file`), else `given` (`--token`), else the
/// environment variable `env` when it is set and not blank; `None` when none says one.
pub fn token(given: Option<String>, file: Option<&Path>, env: &str) -> Result<Option<String>> {
    if let Some(file) = file {
        return read_token_file(file).map(Some);
    }
    if let Some(t) = given {
        if t.trim().is_empty() {
            bail!("--token is empty");
        }
        return Ok(Some(t));
    }
    Ok(std::env::var(env)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

/// The token in `path`: its first line, blanks around it ignored. A file other users may read
/// is used, with a warning on stderr.
pub fn read_token_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    if let Ok(meta) = std::fs::metadata(path)
        && meta.mode() & 0o077 != 0
    {
        eprintln!(
            "jvmprof: warning: the token file {} is readable by others (mode {:04o}); chmod 600 it",
            path.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_file_wins_and_its_first_line_is_the_token() {
        let dir = std::env::temp_dir().join(format!("jvmprof-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t");
        std::fs::write(&f, "  s3cret \nignored\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let env = "JVMPROF_TEST_TOKEN_UNSET_1";
        assert_eq!(
            token(Some("cli".into()), Some(&f), env).unwrap().as_deref(),
            Some("s3cret")
        );
        assert_eq!(
            token(Some("cli".into()), None, env).unwrap().as_deref(),
            Some("cli")
        );
        assert_eq!(token(None, None, env).unwrap(), None);
        std::fs::write(&f, "\n").unwrap();
        let e = token(None, Some(&f), env).unwrap_err().to_string();
        assert_eq!(e, format!("the token file {} is empty", f.display()));
        let missing = dir.join("missing");
        let e = token(None, Some(&missing), env).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("cannot read the token file {}", missing.display())
        );
        assert_eq!(
            token(Some(" ".into()), None, env).unwrap_err().to_string(),
            "--token is empty"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
