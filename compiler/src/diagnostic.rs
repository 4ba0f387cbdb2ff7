//! Diagnostics as data: a code from [`crate::codes`], a primary span with a
//! label, related spans, a help line and an optional certain fix. Rendering
//! happens only at the edges (CLI, LSP).

use crate::codes::{Code, Severity};
use crate::syntax::{Shift, Span};

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    /// The stable code.
    pub code: Code,
    /// What is wrong, in one sentence.
    pub message: String,
    /// Where it is wrong.
    pub span: Span,
    /// A short label on the primary span.
    pub label: String,
    /// Other places that explain the finding (a first declaration, a glob that shadows).
    pub related: Vec<Related>,
    /// What to write instead.
    pub help: Option<String>,
    /// Background: which revision or rule the finding comes from.
    pub note: Option<String>,
    /// An edit that certainly fixes the finding.
    pub fix: Option<Fix>,
}

/// A secondary location.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Related {
    /// Where.
    pub span: Span,
    /// Why it matters.
    pub message: String,
}

/// A certain fix: replace `span` with `replacement`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fix {
    /// A title for an editor's quick-fix menu.
    pub title: String,
    /// The bytes replaced (empty for an insertion).
    pub span: Span,
    /// The new text.
    pub replacement: String,
}

impl Diagnostic {
    /// A finding with a code, message, span and label.
    pub fn new(
        code: Code,
        span: Span,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            span,
            label: label.into(),
            related: Vec::new(),
            help: None,
            note: None,
            fix: None,
        }
    }

    /// Adds a help line.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds a note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Adds a related location.
    pub fn related(mut self, span: Span, message: impl Into<String>) -> Self {
        self.related.push(Related {
            span,
            message: message.into(),
        });
        self
    }

    /// Adds a certain fix.
    pub fn fix(
        mut self,
        title: impl Into<String>,
        span: Span,
        replacement: impl Into<String>,
    ) -> Self {
        self.fix = Some(Fix {
            title: title.into(),
            span,
            replacement: replacement.into(),
        });
        self
    }

    /// The code's severity.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }
}

impl Shift for Diagnostic {
    fn shift(&mut self, by: usize) {
        let Diagnostic {
            code: _,
            message: _,
            span,
            label: _,
            related,
            help: _,
            note: _,
            fix,
        } = self;
        span.shift(by);
        for Related { span, message: _ } in related {
            span.shift(by);
        }
        if let Some(Fix {
            title: _,
            span,
            replacement: _,
        }) = fix
        {
            span.shift(by);
        }
    }
}

/// The closest candidate to `word` by edit distance, if close enough to be
/// a plausible misspelling.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    // A word much longer than every candidate cannot be a misspelling of one,
    // and edit distance is quadratic: skip it (a 1 MB word must stay cheap).
    let candidates: Vec<&'a str> = candidates.into_iter().collect();
    let longest = candidates
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    if word.len() > 4 * longest.max(8) {
        return None;
    }
    let lowered = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            let distance = strsim::damerau_levenshtein(word, c).min(strsim::damerau_levenshtein(
                &lowered,
                &c.to_ascii_lowercase(),
            ));
            (distance, c)
        })
        .filter(|(distance, c)| *distance <= threshold(word.chars().count().max(c.chars().count())))
        // Ties go to the candidate that shares more of the word's start (`KB` → `KiB`, not `B`).
        .min_by(|(da, a), (db, b)| {
            da.cmp(db).then_with(|| {
                let (ja, jb) = (
                    strsim::jaro_winkler(&lowered, &a.to_ascii_lowercase()),
                    strsim::jaro_winkler(&lowered, &b.to_ascii_lowercase()),
                );
                jb.total_cmp(&ja)
            })
        })
        .map(|(_, c)| c)
}

fn threshold(len: usize) -> usize {
    match len {
        0..=3 => 1,
        4..=7 => 2,
        _ => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        let statements = ["sampling", "max_tokens", "max_input", "budget"];
        assert_eq!(did_you_mean("max_token", statements), Some("max_tokens"));
        assert_eq!(did_you_mean("samplng", statements), Some("sampling"));
        assert_eq!(did_you_mean("Budget", statements), Some("budget"));
        assert_eq!(did_you_mean("zzz", statements), None);
        assert_eq!(did_you_mean("KB", ["B", "KiB", "MiB"]), Some("KiB"));
        assert_eq!(
            did_you_mean("thisserver", ["none", "thisServer", "allServers"]),
            Some("thisServer")
        );
    }
}
