//! Diagnostics as data: a code from [`crate::codes`], a primary span with a
//! label, related spans, a help line, an optional certain fix and the
//! corrections offered as choices. Rendering happens only at the edges (CLI,
//! LSP).
//!
//! A fix is *certain* when applying it cannot change what the policy means
//! beyond what the writer plainly wrote; `mcpc check --fix` and the editor's
//! "apply every certain fix" apply only those. A correction that picks one
//! of several values of different meaning (a switch's `on`/`off`, a window's
//! kind, a unit's scale) is a *choice*: offered, never applied unasked
//! ([`Vocabulary`], `docs/spec/language.md`, "Fixes").

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
    /// Edits that may fix it, for the writer to choose from (never applied
    /// by `--fix`).
    pub choices: Vec<Fix>,
}

/// A secondary location.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Related {
    /// Where.
    pub span: Span,
    /// Why it matters.
    pub message: String,
}

/// An edit: replace `span` with `replacement`. In [`Diagnostic::fix`] it is
/// certain; in [`Diagnostic::choices`] it is one of the writer's options.
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
            choices: Vec::new(),
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

    /// Adds a correction to choose from (not certain: never applied by `--fix`).
    pub fn choice(
        mut self,
        title: impl Into<String>,
        span: Span,
        replacement: impl Into<String>,
    ) -> Self {
        self.choices.push(Fix {
            title: title.into(),
            span,
            replacement: replacement.into(),
        });
        self
    }

    /// Suggests the words of `candidates` nearest to `word` (written at
    /// `span`): the help line, and a certain fix or choices as `vocabulary`
    /// says. `shown` renders a candidate as the writer would write it in
    /// place (`60s` for the unit `s`). `Err` gives the finding back
    /// unchanged when no candidate is near.
    #[allow(clippy::result_large_err)] // the `Err` is the finding itself, as given
    pub fn suggest<'a>(
        self,
        word: &str,
        candidates: impl IntoIterator<Item = &'a str>,
        span: Span,
        vocabulary: Vocabulary,
        shown: impl Fn(&str) -> String,
    ) -> Result<Self, Self> {
        let candidates: Vec<&'a str> = candidates.into_iter().collect();
        let near = nearest(word, candidates.iter().copied());
        let Some(first) = near.first().copied() else {
            return Err(self);
        };
        // A unit one edit further from another unit is a choice of scale
        // too: `10mes` is one slip from `ms` and two (a plural) from `m`.
        // (A unit in another case, `Ms` for `ms`, stays certain.)
        let runner_up_close = vocabulary == Vocabulary::Unit && {
            let best = edit_distance(word, first);
            best > 0
                && candidates
                    .iter()
                    .filter(|c| **c != first && **c != word)
                    .any(|c| edit_distance(word, c) <= best + 1)
        };
        if !runner_up_close && vocabulary.certain(word, &near) {
            let help = format!("did you mean `{}`?", shown(first));
            return Ok(self
                .help(help)
                .fix(format!("replace with `{first}`"), span, first));
        }
        let help = match near.as_slice() {
            [one] => format!(
                "did you mean `{}`? Not applied by `--fix`: {}",
                shown(one),
                vocabulary.why()
            ),
            _ => {
                let options: Vec<String> = near.iter().map(|c| format!("`{}`", shown(c))).collect();
                format!(
                    "`{word}` is as close to {} as to {}, which mean different things: write the one you mean",
                    options[..options.len() - 1].join(", "),
                    options[options.len() - 1]
                )
            }
        };
        let mut d = self.help(help);
        for candidate in near {
            d = d.choice(format!("replace with `{candidate}`"), span, candidate);
        }
        Ok(d)
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
            choices,
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
        for choice in choices {
            choice.span.shift(by);
        }
    }
}

/// What kind of word a correction replaces, which decides whether the
/// correction is certain (`docs/spec/language.md`, "Fixes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vocabulary {
    /// A name: a keyword, an identity field, a reason, a revision, a code.
    /// Certain when one candidate is nearer than every other: a name picks
    /// what is written, never what it is set to.
    Name,
    /// A value among values of different meaning: `on`/`off`, the consent
    /// modes, context scopes, metrics, calendar windows, `true`/`false`,
    /// ttl words. Certain only when the word is the value in another case
    /// (`Off`): any other correction chooses between opposites.
    Value,
    /// A unit (`ms`, `KiB`, `k`): certain when one unit is nearer than
    /// every other by two edits or more, the word is not itself a unit of another quantity (`M`
    /// is a million, not a minute) and it is longer than one letter (`K` is
    /// one slip from `k` and from `M`): otherwise a choice of scale.
    Unit,
}

impl Vocabulary {
    /// Whether correcting `word` to the only element of `near` is certain.
    fn certain(self, word: &str, near: &[&str]) -> bool {
        let [only] = near else {
            return false;
        };
        match self {
            Vocabulary::Name => true,
            Vocabulary::Value => only.eq_ignore_ascii_case(word),
            Vocabulary::Unit => word.chars().count() > 1 && !crate::statements::is_any_unit(word),
        }
    }

    /// Why a single suggestion is only offered.
    fn why(self) -> &'static str {
        match self {
            Vocabulary::Value => "each value means something else, so the choice is yours",
            _ => "units differ in scale, so the choice is yours",
        }
    }
}

/// The closest candidate to `word` by edit distance, if close enough to be
/// a plausible misspelling; of several equally close, the one that shares
/// more of the word's start (`KB` → `KiB`, not `B`). For a help line only:
/// whether a correction is certain is [`Diagnostic::suggest`]'s to say.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    nearest(word, candidates).first().copied()
}

/// Every candidate at the smallest edit distance from `word`, if that is
/// close enough to be a plausible misspelling (case differences count as
/// none); the one sharing more of the word's start first.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    // A word much longer than every candidate cannot be a misspelling of one,
    // and edit distance is quadratic: skip it (a 1 MB word must stay cheap).
    let candidates: Vec<&'a str> = candidates.into_iter().collect();
    let longest = candidates
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    if word.len() > 4 * longest.max(8) {
        return Vec::new();
    }
    let lowered = word.to_ascii_lowercase();
    let mut scored: Vec<(usize, &'a str)> = candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (edit_distance(word, c), c))
        .filter(|(distance, c)| *distance <= threshold(word.chars().count().max(c.chars().count())))
        .collect();
    let Some(best) = scored.iter().map(|(d, _)| *d).min() else {
        return Vec::new();
    };
    scored.retain(|(d, _)| *d == best);
    scored.sort_by(|(_, a), (_, b)| {
        let (ja, jb) = (
            strsim::jaro_winkler(&lowered, &a.to_ascii_lowercase()),
            strsim::jaro_winkler(&lowered, &b.to_ascii_lowercase()),
        );
        jb.total_cmp(&ja)
    });
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().map(|(_, c)| c).collect()
}

/// The edit distance of `word` from `candidate`, case differences counting
/// as none.
fn edit_distance(word: &str, candidate: &str) -> usize {
    strsim::damerau_levenshtein(word, candidate).min(strsim::damerau_levenshtein(
        &word.to_ascii_lowercase(),
        &candidate.to_ascii_lowercase(),
    ))
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
