//! Numbers with units: counts, sizes and durations, with range checks.

use super::Checker;
use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::statements::Unit;
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

/// What to say about a zero or negative quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Zero {
    /// A limit: zero would refuse everything.
    Limit,
    /// A count that admits requests (`rate`, `budget`): zero would refuse everything.
    Refuses,
    /// Anything else: ask for a positive value.
    Plain,
}

fn scaled(checker: &mut Checker, q: &Quantity, factor: u64, what: &str, zero: Zero) -> Option<u64> {
    let value = int_value(checker, &q.number)?;
    if value < 0 {
        checker.push(super::reread::negative(what, &q.number.text, q.number.span));
        return None;
    }
    if value == 0 {
        let help = match zero {
            Zero::Limit => {
                "a limit of zero refuses everything; write `sampling off` for that".to_owned()
            }
            Zero::Refuses => {
                format!("a {what} of zero refuses everything; write `sampling off` for that")
            }
            Zero::Plain => format!("write a positive {what}"),
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
    // A table holds integers up to 2^53 (`table::MAX_INTEGER`): its digest's
    // canonical form writes numbers as doubles, which hold no larger one exactly.
    match u64::try_from(value)
        .ok()
        .and_then(|v| v.checked_mul(factor))
        .filter(|v| *v <= mcpolicy_runtime::table::MAX_INTEGER)
    {
        Some(v) => Some(v),
        None => {
            checker.push(
                Diagnostic::new(
                    Code::E0105,
                    q.span,
                    format!("`{q}` is too large"),
                    "above 2^53",
                )
                .help("write a smaller number: a table holds counts, sizes and durations up to 2^53 (9007199254740992)"),
            );
            None
        }
    }
}

/// A quantity in base units: a count (`4096`, `200k`, `1M`), a size in
/// bytes (`64 KiB`) or a duration in milliseconds (`60s`). `what` names it
/// in findings.
pub(super) fn quantity(
    checker: &mut Checker,
    q: &Quantity,
    unit: Unit,
    what: &str,
    zero: Zero,
) -> Option<u64> {
    let suffix = q.unit.as_ref().map(|u| u.value.as_str());
    let factor = match (unit, suffix) {
        (Unit::Count, Some("k")) => 1_000,
        (Unit::Count, Some("M")) => 1_000_000,
        (Unit::Size, Some("KiB")) => 1 << 10,
        (Unit::Size, Some("MiB")) => 1 << 20,
        (Unit::Size, Some("GiB")) => 1 << 30,
        (Unit::Duration, Some("s")) => 1_000,
        (Unit::Duration, Some("m")) => 60_000,
        (Unit::Duration, Some("h")) => 3_600_000,
        (Unit::Duration, Some("d")) => 86_400_000,
        _ => 1,
    };
    scaled(checker, q, factor, what, zero)
}

/// A duration in milliseconds: `60s`.
pub(super) fn duration(checker: &mut Checker, q: &Quantity, what: &str) -> Option<u64> {
    quantity(checker, q, Unit::Duration, what, Zero::Plain)
}
