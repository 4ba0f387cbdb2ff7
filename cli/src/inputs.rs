//! Directories as input (`mcpc check DIR`, `mcpc fmt DIR`, `mcpc test DIR`):
//! every `*.mcpolicy` file under the directory, recursively, in sorted
//! order, skipping hidden directories (`.git`, `.venv`) and `target/`.
//! Symlinked directories are not followed, so a link loop cannot make a run
//! endless; symlinked files are read (and `fmt` formats their target).

use std::path::{Path, PathBuf};

/// The extension of a policy file.
pub(crate) const EXTENSION: &str = "mcpolicy";

/// Each argument as given, except that a directory becomes the policies
/// under it. A directory with none is an error, as is an unreadable one.
pub(crate) fn expand(args: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for arg in args {
        if arg == "-" || !Path::new(arg).is_dir() {
            out.push(arg.clone());
            continue;
        }
        let found = policies_under(Path::new(arg))?;
        if found.is_empty() {
            return Err(format!("{arg}: no .{EXTENSION} files in this directory"));
        }
        out.extend(found.iter().map(|p| p.to_string_lossy().into_owned()));
    }
    Ok(out)
}

/// Whether a directory entry is skipped: hidden, or a build directory.
fn skipped_dir(name: &str) -> bool {
    name.starts_with('.') || name == "target"
}

/// The policies under `dir`, sorted.
pub(crate) fn policies_under(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let entries = std::fs::read_dir(&current)
            .map_err(|e| format!("cannot read {}: {e}", current.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", current.display()))?;
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let kind = entry
                .file_type()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if kind.is_dir() {
                if !skipped_dir(&name) {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|e| e == EXTENSION)
                && !name.starts_with('.')
                && (kind.is_file() || path.is_file())
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The test file beside a policy: `NAME.tests.toml` for `NAME.mcpolicy`.
pub(crate) fn tests_beside(policy: &Path) -> PathBuf {
    let stem = policy
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    policy.with_file_name(format!("{stem}.tests.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_sorted_and_skips_hidden_and_target() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for path in [
            "b.mcpolicy",
            "a/z.mcpolicy",
            "a/y.mcpolicy",
            "a/notes.txt",
            ".git/x.mcpolicy",
            "target/t.mcpolicy",
            "c/.hidden/h.mcpolicy",
            "c/.h.mcpolicy",
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, "mcpolicy 1\n").expect("write");
        }
        let found: Vec<String> = policies_under(root)
            .expect("walk")
            .iter()
            .map(|p| {
                p.strip_prefix(root)
                    .expect("under")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(found, ["a/y.mcpolicy", "a/z.mcpolicy", "b.mcpolicy"]);
        assert_eq!(
            tests_beside(Path::new("x/team.mcpolicy")),
            Path::new("x/team.tests.toml")
        );
    }
}
