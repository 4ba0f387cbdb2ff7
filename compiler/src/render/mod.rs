//! Diagnostics out: human (miette), JSON, SARIF 2.1.0 and GitHub annotations.
//! The same `Diagnostic` values feed every format, so codes never differ.

mod github;
mod human;
mod json;
mod sarif;

pub use github::github;
pub use human::{Style, human};
pub use json::json;
pub use sarif::sarif;

use crate::codes::Severity;
use crate::diagnostic::Diagnostic;

/// One checked file and what was found in it.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// The path as the user gave it (`<stdin>` for `-`).
    pub path: String,
    /// The text (lossily decoded when the file is not UTF-8).
    pub text: String,
    /// The findings, in source order.
    pub diagnostics: Vec<Diagnostic>,
}

impl FileReport {
    /// Errors and warnings, counted.
    pub fn counts(&self) -> (usize, usize) {
        let errors = self
            .diagnostics
            .iter()
            .filter(|d| d.severity() == Severity::Error)
            .count();
        (errors, self.diagnostics.len() - errors)
    }
}

/// Errors and warnings over every file.
pub fn totals(reports: &[FileReport]) -> (usize, usize) {
    reports
        .iter()
        .map(FileReport::counts)
        .fold((0, 0), |(e, w), (fe, fw)| (e + fe, w + fw))
}
