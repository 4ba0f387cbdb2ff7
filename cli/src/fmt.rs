//! `mcpc fmt [--check | --diff] FILE... | DIR... | -`
//!
//! Rewrites files in the canonical layout (standard input to standard
//! output); a directory stands for every `*.mcpolicy` under it. `--diff`
//! prints a unified diff of what would change and writes nothing. Refuses a file with syntax errors, and refuses to write any
//! output whose compiled table differs from the input's: formatting never
//! changes meaning.
//!
//! A file is replaced atomically through a fresh temporary file beside the
//! real file: a symlinked policy stays a symlink and its target is
//! formatted, the permissions are kept, and a policy with several hard links
//! is refused (exit 2) rather than split into diverging copies.

use std::path::Path;
use std::process::ExitCode;

use mcpolicy_compiler::db::{Database, SourceText, lower_file};
use mcpolicy_compiler::format;
use mcpolicy_compiler::input;
use mcpolicy_compiler::render::{self, FileReport};

use super::{ColorChoice, emit, fail, human_style, inputs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy files or directories (every `*.mcpolicy` under them, sorted;
    /// hidden directories and `target/` skipped); `-` formats standard input
    /// to standard output. A symlink is followed (its target is formatted);
    /// a file with several hard links is refused.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// Change nothing; exit 1 if any file is not formatted.
    #[arg(long, conflicts_with = "diff")]
    check: bool,
    /// Change nothing; print a unified diff of what formatting would change
    /// (to standard output) and exit 1 if there is any.
    #[arg(long)]
    diff: bool,
    /// Colour for diagnostics.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
}

/// The table a text compiles to, if it compiles.
fn table_of(text: &str) -> Option<String> {
    let db = Database::default();
    let source = SourceText::new(&db, String::new(), text.to_owned());
    lower_file(&db, source).as_ref().map(|t| t.to_json())
}

/// Replaces the file `path` names with `text`, atomically: the text goes to
/// a fresh temporary file (created exclusively, under a random name, so a
/// file or symlink planted beside the policy is never written) in the same
/// directory as the real file, which is then renamed over it. A symlink is
/// followed to the file it names (the link stays a link, its target is
/// formatted), and the file's permissions are kept.
///
/// A file with more than one hard link is refused: a rename would give this
/// name the new text and leave the other names with the old one, and
/// writing in place is not atomic (a crash half way would leave a truncated
/// and possibly weaker policy).
pub(crate) fn write_atomically(path: &str, text: &str) -> Result<(), String> {
    use std::io::Write;

    let target = std::fs::canonicalize(path).map_err(|e| format!("cannot resolve {path}: {e}"))?;
    let meta =
        std::fs::metadata(&target).map_err(|e| format!("cannot read {}: {e}", target.display()))?;
    if let Some(links) = hard_links(&meta).filter(|n| *n > 1) {
        return Err(format!(
            "{path} has {links} hard links; replacing it would leave the other names with the old text, so it is not written \
             (format a copy with `mcpc fmt - < {path}`, or replace the hard links with one file and symlinks)"
        ));
    }
    let dir = target.parent().unwrap_or(Path::new("/"));
    let cannot = |e: std::io::Error| format!("cannot write {}: {e}", target.display());
    let mut temp = tempfile::Builder::new()
        .prefix(".mcpc-fmt-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(cannot)?;
    // The mode first, so the text is never readable more widely than the
    // original (the temporary file starts at 0600).
    temp.as_file()
        .set_permissions(meta.permissions())
        .map_err(cannot)?;
    temp.write_all(text.as_bytes()).map_err(cannot)?;
    temp.as_file().sync_all().map_err(cannot)?;
    temp.persist(&target).map_err(|e| cannot(e.error))?;
    Ok(())
}

#[cfg(unix)]
fn hard_links(meta: &std::fs::Metadata) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    Some(meta.nlink())
}

#[cfg(not(unix))]
fn hard_links(_meta: &std::fs::Metadata) -> Option<u64> {
    None
}

fn first_difference(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.lines().count().min(b.lines().count()))
        + 1
}

/// A unified diff from `old` to `new`, with the file named on both sides
/// as `a/PATH` and `b/PATH`, three lines of context.
pub(crate) fn unified_diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

pub fn run(args: Args) -> ExitCode {
    let mut failed = false;
    let files = match inputs::expand(&args.files) {
        Ok(files) => files,
        Err(error) => return fail(error),
    };
    for path in &files {
        let loaded = match input::load(path) {
            Ok(loaded) => loaded,
            Err(error) => return fail(format!("cannot read {path}: {error}")),
        };
        if let Some(problem) = loaded.problem {
            let report = FileReport {
                path: loaded.path,
                text: loaded.text,
                diagnostics: vec![problem],
            };
            say!("{}", render::human(&[report], human_style(args.color)));
            failed = true;
            continue;
        }
        let formatted = match format::format(&loaded.text) {
            Ok(formatted) => formatted,
            Err(error) => {
                sayln!("mcpc: {}: not formatted: {error}", loaded.path);
                let report = FileReport {
                    path: loaded.path,
                    text: loaded.text,
                    diagnostics: error.diagnostics,
                };
                say!("{}", render::human(&[report], human_style(args.color)));
                failed = true;
                continue;
            }
        };
        if formatted != loaded.text && table_of(&formatted) != table_of(&loaded.text) {
            return fail(format!(
                "{}: formatting would change the compiled table; nothing was written (this is a bug in mcpc fmt, please report it)",
                loaded.path
            ));
        }
        if args.diff {
            if formatted != loaded.text {
                emit(&unified_diff(&loaded.path, &loaded.text, &formatted));
                failed = true;
            }
            continue;
        }
        if path == "-" {
            if args.check && formatted != loaded.text {
                sayln!(
                    "<stdin>: not formatted (first difference at line {})",
                    first_difference(&loaded.text, &formatted)
                );
                failed = true;
            } else if !args.check {
                emit(&formatted);
            }
            continue;
        }
        if formatted == loaded.text {
            continue;
        }
        if args.check {
            sayln!(
                "{path}: not formatted (first difference at line {})",
                first_difference(&loaded.text, &formatted)
            );
            failed = true;
        } else if let Err(error) = write_atomically(path, &formatted) {
            return fail(error);
        } else {
            sayln!("formatted {path}");
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
