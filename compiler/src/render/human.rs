//! Human output through miette: graphical with colour on a terminal, plain
//! ASCII otherwise, never coloured under `NO_COLOR`.

use std::fmt;

use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceCode};

use super::{FileReport, totals};
use crate::codes::Severity;
use crate::diagnostic::Diagnostic;

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

struct Drawn<'a> {
    diagnostic: &'a Diagnostic,
    source: &'a NamedSource<String>,
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
        let source = NamedSource::new(&report.path, report.text.clone()).with_language("mcpolicy");
        for diagnostic in report.diagnostics.iter().take(MAX_DRAWN) {
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
