//! The report as text: a summary table (the most trimmed server first,
//! flagged `!` at 90 % or more), then each server's details.

use std::fmt::Write;

use mcpolicy_compiler::render::columns;
use mcpolicy_proxy::log::escape_text;
use serde_json::Value;

use super::report::{Gap, Report, ServerReport, WIDE_PERCENT};
use crate::plural;

/// Text the audit file holds (server ids, model hints, reasons, file
/// names), made inert for a terminal: escapes instead of controls, line
/// ends and bidirectional controls (`mcpolicy_proxy::log::escape_text`).
fn inert(text: &str) -> String {
    escape_text(text).into_owned()
}

fn short(value: &Value) -> String {
    match value {
        Value::String(s) => inert(s),
        Value::Null => "-".to_owned(),
        Value::Array(items) => {
            let names: Vec<String> = items.iter().map(short).collect();
            format!("[{}]", names.join(", "))
        }
        other => other.to_string(),
    }
}

/// An identity shortened to its server and the first hex digits.
fn identity(text: &str) -> String {
    match text.rsplit_once(':') {
        Some((server, hex)) if hex.len() > 12 && hex.is_char_boundary(12) => {
            format!("{}:{}…", inert(server), inert(&hex[..12]))
        }
        _ => inert(text),
    }
}

fn widest(server: &ServerReport) -> String {
    server.widest_max_tokens.as_ref().map_or_else(
        || "-".to_owned(),
        |w| format!("{}→{}", short(&w.requested), short(&w.applied)),
    )
}

/// Trim notes as `kind requested→applied`, comma-separated.
pub(super) fn notes(value: &Value) -> String {
    let Some(map) = value.as_object() else {
        return short(value);
    };
    let parts: Vec<String> = map
        .iter()
        .map(|(kind, note)| {
            format!(
                "{} {}→{}",
                inert(kind),
                short(&note["requested"]),
                short(&note["applied"])
            )
        })
        .collect();
    parts.join(", ")
}

pub(super) fn gaps(kind: &str, gaps: &[Gap]) -> String {
    // Many distinct numbers (each request a little different): their range.
    let numbers: Option<Vec<u64>> = gaps.iter().map(|g| g.requested.as_u64()).collect();
    if let Some(numbers) = numbers.filter(|n| n.len() > 3) {
        let applied: Vec<String> = gaps.iter().map(|g| short(&g.applied)).collect();
        let same = applied.iter().all(|a| *a == applied[0]);
        let times: u64 = gaps.iter().map(|g| g.times).sum();
        let (lo, hi) = (
            numbers.iter().min().copied().unwrap_or(0),
            numbers.iter().max().copied().unwrap_or(0),
        );
        return format!(
            "{} {lo}..{hi}→{} ×{times}",
            inert(kind),
            if same { applied[0].as_str() } else { "…" }
        );
    }
    let parts: Vec<String> = gaps
        .iter()
        .take(3)
        .map(|g| format!("{}→{} ×{}", short(&g.requested), short(&g.applied), g.times))
        .collect();
    let more = gaps.len().saturating_sub(3);
    let tail = if more > 0 {
        format!(" (+{more} more)")
    } else {
        String::new()
    };
    format!("{} {}{tail}", inert(kind), parts.join(", "))
}

/// Renders the report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let span = match (&report.first, &report.last) {
        (Some(first), Some(last)) => format!(", {} … {}", inert(first), inert(last)),
        _ => String::new(),
    };
    let files = if report.files.len() == 1 {
        "1 file".to_owned()
    } else {
        format!("{} files", report.files.len())
    };
    let _ = writeln!(
        out,
        "{} {} from {files}{span}: {} counted, {} outside --since/--until, {} malformed",
        report.lines,
        plural(report.lines as u64, "line", "lines"),
        report.counted,
        report.outside,
        report.malformed.len()
    );
    for bad in &report.malformed {
        let _ = writeln!(
            out,
            "  malformed {}:{}: {}",
            inert(&bad.file.to_string()),
            bad.line,
            inert(&bad.error.to_string())
        );
    }
    if report.servers.is_empty() {
        let _ = writeln!(out, "no decisions");
        return out;
    }
    let name_width = columns::width(
        report
            .servers
            .iter()
            .map(|s| inert(&s.server).chars().count()),
        6,
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {}  {:>9}  {:>5}  {:>5}  {:>5}  {:>7}  {:>7}  {:<18}  {:>6}  {:>6}",
        columns::pad("SERVER", name_width),
        "DECISIONS",
        "ALLOW",
        "TRIM",
        "DENY",
        "CONSENT",
        "TRIMMED",
        "WIDEST maxTokens",
        "LOOPS",
        "ALERTS"
    );
    for s in &report.servers {
        let count = |k: &str| s.outcomes.get(k).copied().unwrap_or(0);
        let flag = if s.decisions > 0 && s.trimmed_percent >= WIDE_PERCENT {
            '!'
        } else {
            ' '
        };
        let loops = s.retry_loops.iter().filter(|l| l.alerts > 0).count();
        let alerts: u64 =
            s.retry_loops.iter().map(|l| l.alerts).sum::<u64>() + s.trim_alerts.len() as u64;
        let _ = writeln!(
            out,
            "{flag} {}  {:>9}  {:>5}  {:>5}  {:>5}  {:>7}  {:>6.1}%  {:<18}  {:>6}  {:>6}",
            columns::pad(&inert(&s.server), name_width),
            s.decisions,
            count("allow"),
            count("trim"),
            count("deny"),
            count("consent"),
            s.trimmed_percent,
            widest(s),
            loops,
            alerts
        );
    }
    for s in &report.servers {
        let _ = writeln!(out);
        let _ = writeln!(out, "server \"{}\"", inert(&s.server));
        if s.decisions > 0 && s.trimmed_percent >= WIDE_PERCENT {
            let _ = writeln!(
                out,
                "  ! asks wider than it may: {:.1}% of {} {} trimmed",
                s.trimmed_percent,
                s.decisions,
                plural(s.decisions, "decision", "decisions")
            );
        }
        let reasons: Vec<String> = s
            .reasons
            .iter()
            .map(|(r, n)| format!("{} ×{n}", inert(r)))
            .collect();
        if !reasons.is_empty() {
            let _ = writeln!(out, "  reasons: {}", reasons.join(", "));
        }
        if !s.gaps.is_empty() {
            let parts: Vec<String> = s.gaps.iter().map(|(k, g)| gaps(k, g)).collect();
            let _ = writeln!(
                out,
                "  trims ({}, requested→applied): {}",
                s.trimmed,
                parts.join("; ")
            );
        }
        for alert in &s.trim_alerts {
            let _ = writeln!(
                out,
                "  trim alert at {}: {} of {} {} trimmed; gap {}",
                inert(&alert.time.to_string()),
                alert.trimmed,
                alert.calls,
                plural(alert.calls, "call", "calls"),
                notes(&alert.gap)
            );
        }
        let alerted: Vec<_> = s.retry_loops.iter().filter(|l| l.alerts > 0).collect();
        for l in &alerted {
            let _ = writeln!(
                out,
                "  retry loop: {} alerted {}× (first {}), up to {} re-presentations in a window, represented {}",
                identity(&l.identity),
                l.alerts,
                inert(l.first_alert.as_deref().unwrap_or("-")),
                l.max_count,
                l.represented
            );
        }
        let represented: Vec<String> = s
            .retry_loops
            .iter()
            .filter(|l| l.alerts == 0)
            .map(|l| format!("{} {}", identity(&l.identity), l.represented))
            .collect();
        if !represented.is_empty() {
            let _ = writeln!(out, "  represented: {}", represented.join(", "));
        }
        let c = &s.consent;
        if c.prompts + c.approved + c.refused + c.failed + c.unanswered > 0 {
            let mut failed = String::new();
            if c.failed > 0 {
                failed.push_str(&format!(", {} failed by the client", c.failed));
            }
            if c.unanswered > 0 {
                failed.push_str(&format!(
                    ", {} unanswered when the session ended",
                    c.unanswered
                ));
            }
            let _ = writeln!(
                out,
                "  consent: {} {}, {} approved, {} refused{failed}",
                c.prompts,
                plural(c.prompts, "prompt", "prompts"),
                c.approved,
                c.refused
            );
        }
        if s.replayed > 0 || s.deadline_misses > 0 || s.errors > 0 {
            let _ = writeln!(
                out,
                "  replayed {}, deadline misses {}, invalid or failed {}",
                s.replayed, s.deadline_misses, s.errors
            );
        }
    }
    out
}
