//! Human output through miette: graphical with colour on a terminal, plain
//! ASCII otherwise, never coloured under `NO_COLOR`.

use std::fmt;

use miette::{
    GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, MietteSpanContents,
    SourceCode, SourceSpan, SpanContents,
};

use super::{FileReport, totals};
use crate::codes::Severity;
use crate::diagnostic::Diagnostic;
use crate::line_index::LineIndex;

/// How to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Unicode box drawing with colour.
    Fancy,
    /// Unicode box drawing, no colour.
    FancyNoColor,
    /// ASCII, no colour: logs, CI and snapshots.
    Plain,
}

/// At most this many findings per file are drawn; the rest are counted.
const MAX_DRAWN: usize = 200;

/// Lines longer than this are not drawn: the finding is printed as one line
/// with its location (miette cannot pad past column 65535, and nobody wants
/// a megabyte of source echoed back).
const MAX_DRAWN_LINE: usize = 2_000;

/// The text miette draws from. Lone CRs become LFs (same length, so spans
/// hold) because the grammar ends lines there too, and columns count
/// characters after any byte-order mark, as JSON, SARIF and editors do.
struct PolicySource {
    name: String,
    text: String,
}

impl PolicySource {
    fn new(name: &str, text: &str) -> Self {
        let bytes = text.as_bytes();
        let lone_cr = |i: usize| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n');
        let text = if (0..bytes.len()).any(lone_cr) {
            text.char_indices()
                .map(|(i, c)| if c == '\r' && lone_cr(i) { '\n' } else { c })
                .collect()
        } else {
            text.to_owned()
        };
        PolicySource {
            name: name.to_owned(),
            text,
        }
    }

    /// Whether every line a finding points at is short enough to draw.
    fn drawable(&self, d: &Diagnostic) -> bool {
        std::iter::once(d.span)
            .chain(d.related.iter().map(|r| r.span))
            .all(|span| {
                let start = span.start.min(self.text.len());
                let line_start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
                let line_end = self.text[start..]
                    .find('\n')
                    .map_or(self.text.len(), |i| start + i);
                line_end - line_start <= MAX_DRAWN_LINE && span.len() <= 20 * MAX_DRAWN_LINE
            })
    }
}

impl SourceCode for PolicySource {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let inner = self
            .text
            .read_span(span, context_lines_before, context_lines_after)?;
        let start = inner.span().offset().min(self.text.len());
        let line_start = self.text[..start].rfind('\n').map_or(0, |i| i + 1);
        let mut prefix = &self.text[line_start..start];
        if line_start == 0 {
            prefix = prefix.strip_prefix('\u{feff}').unwrap_or(prefix);
        }
        let contents = MietteSpanContents::new_named(
            self.name.clone(),
            inner.data(),
            *inner.span(),
            inner.line(),
            prefix.chars().count(),
            inner.line_count(),
        )
        .with_language("mcpolicy");
        Ok(Box::new(contents))
    }
}

/// A finding on a line too long to draw: one line, its location, the help.
fn undrawn(path: &str, text: &str, index: &LineIndex, d: &Diagnostic) -> String {
    let at = index.position(text, d.span.start);
    let mut text = format!(
        "{}[{}]: {}\n  --> {path}:{}:{} ({}; the line is too long to show)\n",
        d.severity().as_str(),
        d.code,
        d.message,
        at.line,
        at.column,
        d.label
    );
    if let Some(help) = &d.help {
        text.push_str(&format!("  help: {help}\n"));
    }
    if let Some(note) = &d.note {
        text.push_str(&format!("  note: {note}\n"));
    }
    text
}

struct Drawn<'a> {
    diagnostic: &'a Diagnostic,
    source: &'a PolicySource,
}

impl fmt::Debug for Drawn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drawn")
            .field("code", &self.diagnostic.code)
            .finish()
    }
}

impl fmt::Display for Drawn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.diagnostic.message)
    }
}

impl std::error::Error for Drawn<'_> {}

impl miette::Diagnostic for Drawn<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        Some(Box::new(self.diagnostic.code.as_str()))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.diagnostic.severity() {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        let d = self.diagnostic;
        match (&d.help, &d.note) {
            (None, None) => None,
            (Some(help), None) => Some(Box::new(help.as_str())),
            (None, Some(note)) => Some(Box::new(format!("note: {note}"))),
            (Some(help), Some(note)) => Some(Box::new(format!("{help}\nnote: {note}"))),
        }
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let d = self.diagnostic;
        let primary = LabeledSpan::new_primary_with_span(Some(d.label.clone()), d.span);
        let related = d
            .related
            .iter()
            .map(|r| LabeledSpan::new_with_span(Some(r.message.clone()), r.span));
        Some(Box::new(std::iter::once(primary).chain(related)))
    }
}

/// Renders every report and a summary line.
pub fn human(reports: &[FileReport], style: Style) -> String {
    let theme = match style {
        Style::Fancy => GraphicalTheme::unicode(),
        Style::FancyNoColor => GraphicalTheme::unicode_nocolor(),
        Style::Plain => GraphicalTheme::none(),
    };
    let handler = GraphicalReportHandler::new_themed(theme)
        .with_width(100)
        .with_links(false);
    let mut out = String::new();
    for report in reports {
        if report.diagnostics.is_empty() {
            continue;
        }
        let source = PolicySource::new(&report.path, &report.text);
        let index = LineIndex::new(&report.text);
        for diagnostic in report.diagnostics.iter().take(MAX_DRAWN) {
            if !source.drawable(diagnostic) {
                out.push_str(&undrawn(&report.path, &report.text, &index, diagnostic));
                out.push('\n');
                continue;
            }
            let drawn = Drawn {
                diagnostic,
                source: &source,
            };
            if handler.render_report(&mut out, &drawn).is_err() {
                out.push_str(&format!(
                    "{}[{}]: {}\n",
                    diagnostic.severity().as_str(),
                    diagnostic.code,
                    diagnostic.message
                ));
            }
            out.push('\n');
        }
        if report.diagnostics.len() > MAX_DRAWN {
            out.push_str(&format!(
                "… and {} more findings in {} (use --format json to see them all)\n\n",
                report.diagnostics.len() - MAX_DRAWN,
                report.path
            ));
        }
    }
    let (errors, warnings) = totals(reports);
    let files = reports.len();
    let noun = if files == 1 { "file" } else { "files" };
    if errors + warnings == 0 {
        let names: Vec<&str> = reports.iter().map(|r| r.path.as_str()).collect();
        out.push_str(&format!(
            "ok: {} ({files} {noun} checked, no findings)\n",
            names.join(", ")
        ));
    } else {
        out.push_str(&format!(
            "{} {}, {} {} in {files} {noun}\n",
            errors,
            if errors == 1 { "error" } else { "errors" },
            warnings,
            if warnings == 1 { "warning" } else { "warnings" },
        ));
    }
    out
}
