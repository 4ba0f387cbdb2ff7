//! Reading policy files: size limit, UTF-8 check, stdin. A file that cannot
//! be decoded is still a report (with E0005/E0006), not an I/O failure.
//!
//! Every file a tool reads because the user named it (a policy, a request, a
//! test file, an audit log, a configuration) is opened with [`open_regular`]
//! and read with [`read_regular`]: a regular file only, never a FIFO, a
//! device or a directory (a FIFO with no writer blocks forever; a device may
//! never end), and never more than the caller's bound.

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
        let file = open_regular(std::path::Path::new(path))?;
        let mut bytes = Vec::new();
        file.take(MAX_POLICY_BYTES + 1).read_to_end(&mut bytes)?;
        (path.to_owned(), bytes)
    };
    Ok(from_bytes(name, bytes))
}

/// Opens `path` for reading if it is a regular file (symlinks followed).
/// A directory, a FIFO, a socket or a device is refused with
/// `InvalidInput`, before any read: the open itself does not wait for a
/// FIFO's writer (it is non-blocking, and the descriptor's type is checked
/// before it is read).
pub fn open_regular(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "is a directory"
        } else {
            "is not a regular file (a FIFO, socket or device is not read)"
        };
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, what));
    }
    // `O_NONBLOCK` stays set: it changes nothing for a regular file, whose
    // reads never wait.
    Ok(file)
}

/// The bytes of the regular file `path`, at most `max`: a larger file is an
/// `InvalidData` error that names the bound, and no more than `max + 1`
/// bytes are ever held.
pub fn read_regular(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than the {max} bytes read at most"),
        ));
    }
    Ok(bytes)
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
