//! Reading policy files: size limit, UTF-8 check, stdin. A file that cannot
//! be decoded is still a report (with E0005/E0006), not an I/O failure.

use std::io::Read;

use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::Span;

/// The largest policy the compiler reads.
pub const MAX_POLICY_BYTES: u64 = 64 << 20;

/// A file's text, or the finding that says why it has none.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The path as given (`<stdin>` for `-`).
    pub path: String,
    /// The text, lossily decoded when `problem` is set.
    pub text: String,
    /// Why the text cannot be checked, if it cannot.
    pub problem: Option<Diagnostic>,
}

/// Reads `path` (`-` for standard input). Errors are I/O failures only.
pub fn load(path: &str) -> std::io::Result<Loaded> {
    let (name, bytes) = if path == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .lock()
            .take(MAX_POLICY_BYTES + 1)
            .read_to_end(&mut bytes)?;
        ("<stdin>".to_owned(), bytes)
    } else {
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is a directory",
            ));
        }
        let mut bytes = Vec::new();
        file.take(MAX_POLICY_BYTES + 1).read_to_end(&mut bytes)?;
        (path.to_owned(), bytes)
    };
    Ok(from_bytes(name, bytes))
}

/// Decodes bytes already read.
pub fn from_bytes(path: String, bytes: Vec<u8>) -> Loaded {
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        let problem = Diagnostic::new(
            Code::E0006,
            Span::new(0, 0),
            format!("the file is larger than {} MiB", MAX_POLICY_BYTES >> 20),
            "file too large",
        )
        .help("a policy is a few hundred kilobytes at most; check that this is the right file");
        return Loaded {
            path,
            text: String::new(),
            problem: Some(problem),
        };
    }
    match String::from_utf8(bytes) {
        Ok(text) => Loaded {
            path,
            text,
            problem: None,
        },
        Err(error) => {
            let at = error.utf8_error().valid_up_to();
            let bad_len = error.utf8_error().error_len().unwrap_or(1);
            let text = String::from_utf8_lossy(error.as_bytes()).into_owned();
            let problem = Diagnostic::new(
                Code::E0005,
                Span::new(at, at + 1),
                format!("the file is not valid UTF-8: {bad_len} bad byte(s) at offset {at}"),
                "not UTF-8",
            )
            .help("re-save the file as UTF-8");
            // The lossy text replaces the bad bytes with U+FFFD, so the span points at it there.
            Loaded {
                path,
                text,
                problem: Some(problem),
            }
        }
    }
}
