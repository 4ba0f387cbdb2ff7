//! How `mcpc store` writes: aligned tables and RFC 3339 times for people,
//! one JSON document for programs.

use mcpolicy_runtime::clock::format_rfc3339;
use mcpolicy_runtime::store::{Millis, StoredEntry};
use serde_json::{Value, json};

use crate::emit;

/// An instant as RFC 3339 UTC; `Millis::MAX` (a limit that never frees) as `never`.
pub(crate) fn time(at: Millis) -> String {
    if at == Millis::MAX {
        "never".to_owned()
    } else {
        format_rfc3339(at)
    }
}

/// [`time`] for JSON: `null` for `Millis::MAX`.
pub(crate) fn json_time(at: Millis) -> Value {
    if at == Millis::MAX {
        Value::Null
    } else {
        Value::from(format_rfc3339(at))
    }
}

/// Columns padded to their widest cell, two spaces apart (the last column
/// unpadded), a header row first.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths[i].saturating_sub(cell.chars().count()) + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// Prints `value` as pretty JSON and a newline.
pub(crate) fn print_json(value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    emit(&format!("{text}\n"));
}

/// When a decision expires, for people: `never` (until the server's block
/// changes) or its instant.
pub(crate) fn expires(entry: &StoredEntry) -> String {
    entry
        .decision
        .expires_at
        .map_or_else(|| "never".to_owned(), time)
}

/// The deciding statement's stored name, `?` when not recorded (schema 3).
pub(crate) fn statement(entry: &StoredEntry) -> String {
    entry
        .decision
        .statement
        .as_deref()
        .unwrap_or("?")
        .to_owned()
}

/// One decision as JSON: every stored field; `current` when a policy says
/// whether its digest is still the server's block (else `null`); `data`
/// parsed when it is JSON (kept as text otherwise).
pub(crate) fn entry_json(entry: &StoredEntry, now: Millis, current: Option<bool>) -> Value {
    let d = &entry.decision;
    let data = d
        .data
        .as_deref()
        .map(|text| serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::from(text)));
    json!({
        "server": entry.key.server_id,
        "identity": entry.key.identity,
        "verdict": d.verdict.as_str(),
        "reason": &*d.reason,
        "statement": d.statement.as_deref(),
        "represented": d.represented,
        "storedAt": json_time(d.decided_at),
        "expiresAt": d.expires_at.map(json_time),
        "expired": d.is_expired(now),
        "digest": &*d.digest,
        "current": current,
        "recomputable": d.recomputable,
        "data": data,
    })
}
