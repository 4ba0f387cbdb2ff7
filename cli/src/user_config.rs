//! The user's mcpolicy settings, `config.toml` in the per-user configuration
//! directory: what `mcpc proxy` and `mcpc store` both read, so that a proxy an MCP client starts and the `mcpc store` the
//! user runs from a shell find the same decision store
//! (`docs/spec/clients.md`, "Which store").
//!
//! The file is found from the home directory alone, never from
//! `XDG_CONFIG_HOME` or another variable a shell sets: MCP clients start
//! servers with a reduced environment (the TypeScript SDK passes only
//! `HOME`, `PATH`, `SHELL`, `TERM`, `USER` and `LOGNAME`), so anything read
//! from a variable would differ between the proxy and the shell.
//!
//! ```toml
//! store = "/home/me/.local/state/mcpolicy/decisions.sqlite3"
//! ```

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The settings the file holds. An unknown key is an error: a misspelt
/// `store` silently ignored would send the proxies and `mcpc store` to
/// different stores again.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserConfig {
    /// The decision store every proxy and `mcpc store` use when `--store`
    /// is not given: a SQLite path or a PostgreSQL spec.
    pub store: Option<String>,
}

/// The file: `~/.config/mcpolicy/config.toml` on Linux and other Unix,
/// `~/Library/Application Support/mcpolicy/config.toml` on macOS,
/// `%APPDATA%\mcpolicy\config.toml` on Windows. `None` without a home
/// directory.
pub(crate) fn path() -> Option<PathBuf> {
    let dir = if cfg!(windows) {
        std::env::var_os("APPDATA")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)?
    } else if cfg!(target_os = "macos") {
        mcpolicy_proxy::home_dir()?.join("Library/Application Support")
    } else {
        mcpolicy_proxy::home_dir()?.join(".config")
    };
    Some(dir.join("mcpolicy").join("config.toml"))
}

/// Reads the file at `path`; a missing file is the empty configuration.
pub(crate) fn read_from(path: &Path) -> Result<UserConfig, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(UserConfig::default()),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    toml::from_str(&text).map_err(|error| {
        format!(
            "{}: {}",
            path.display(),
            error.message().trim_end_matches('\n')
        )
    })
}

/// The user's configuration (empty without a home directory or a file).
pub(crate) fn read() -> Result<UserConfig, String> {
    match path() {
        Some(path) => read_from(&path),
        None => Ok(UserConfig::default()),
    }
}

/// Records `store` as the store of the configuration at `path` when it
/// names none: the line goes first in the file (before any table, where a
/// top-level key must be), the rest of the file is kept as it is. Returns
/// the store the file names afterwards.
pub(crate) fn record_store(path: &Path, store: &str) -> Result<String, String> {
    let config = read_from(path)?;
    if let Some(existing) = config.store {
        return Ok(existing);
    }
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    // A JSON string is a TOML basic string: the same escapes.
    let line = format!(
        "store = {}\n",
        serde_json::to_string(store).map_err(|e| e.to_string())?
    );
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = format!("{line}{old}");
    if old.is_empty() {
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    } else {
        super::fmt::write_atomically(&path.to_string_lossy(), &text)?;
    }
    Ok(store.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_store_reads_back_and_is_never_replaced() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("mcpolicy/config.toml");
        assert_eq!(read_from(&path), Ok(UserConfig::default()));
        let odd = r#"C:\Users\me\"quoted"\decisions.sqlite3"#;
        assert_eq!(record_store(&path, odd).as_deref(), Ok(odd));
        assert_eq!(read_from(&path).expect("reads").store.as_deref(), Some(odd));
        assert_eq!(record_store(&path, "/other").as_deref(), Ok(odd));
    }

    #[test]
    fn a_misspelt_key_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "stroe = \"/x\"\n").expect("write");
        let error = read_from(&path).expect_err("refused");
        assert!(error.contains("config.toml"), "{error}");
        assert!(error.contains("stroe"), "{error}");
    }
}
