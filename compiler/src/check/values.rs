//! Numbers with units: counts, sizes and durations, with range checks.

use super::Checker;
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::{IntLit, Quantity};

/// The literal's value, or an out-of-range finding.
pub(super) fn int_value(checker: &mut Checker, lit: &IntLit) -> Option<i64> {
    if lit.value.is_none() {
        checker.push(
            Diagnostic::new(
                Code::E0105,
                lit.span,
                format!("`{}` is too large", lit.text),
                "does not fit in 64 bits",
            )
            .help("write a smaller number"),
        );
    }
    lit.value
}

fn scaled(checker: &mut Checker, q: &Quantity, factor: u64, what: &str) -> Option<u64> {
    let value = int_value(checker, &q.number)?;
    if value <= 0 {
        let help = match what {
            "max_messages" | "max_input" => {
                "a limit of zero refuses everything; write `sampling off` for that".to_owned()
            }
            "rate" | "budget" => {
                format!("a {what} of zero refuses everything; write `sampling off` for that")
            }
            _ => format!("write a positive {what}"),
        };
        checker.push(
            Diagnostic::new(
                Code::E0105,
                q.number.span,
                format!("{what} must be positive, found `{}`", q.number.text),
                "not positive",
            )
            .help(help),
        );
        return None;
    }
    match u64::try_from(value)
        .ok()
        .and_then(|v| v.checked_mul(factor))
    {
        Some(v) => Some(v),
        None => {
            checker.push(
                Diagnostic::new(
                    Code::E0105,
                    q.span,
                    format!("`{q}` is too large"),
                    "overflows 64 bits",
                )
                .help("write a smaller number"),
            );
            None
        }
    }
}

/// A count: `4096`, `200k`, `1M`.
pub(super) fn count(checker: &mut Checker, q: &Quantity, what: &str) -> Option<u64> {
    let factor = match q.unit.as_ref().map(|u| u.value.as_str()) {
        Some("k") => 1_000,
        Some("M") => 1_000_000,
        _ => 1,
    };
    scaled(checker, q, factor, what)
}

/// A size in bytes: `64 KiB`.
pub(super) fn size(checker: &mut Checker, q: &Quantity) -> Option<u64> {
    let factor = match q.unit.as_ref().map(|u| u.value.as_str()) {
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some("GiB") => 1 << 30,
        _ => 1,
    };
    scaled(checker, q, factor, "max_input")
}

/// A duration in milliseconds: `60s`.
pub(super) fn duration(checker: &mut Checker, q: &Quantity, what: &str) -> Option<u64> {
    let factor = match q.unit.as_ref().map(|u| u.value.as_str()) {
        Some("s") => 1_000,
        Some("m") => 60_000,
        Some("h") => 3_600_000,
        Some("d") => 86_400_000,
        _ => 1,
    };
    scaled(checker, q, factor, what)
}
