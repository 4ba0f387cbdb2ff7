//! Which JSON-RPC error codes a policy may use, by MCP revision. Each finding
//! cites the revision (or JSON-RPC 2.0) it comes from.

use mcpolicy_runtime::table::ProtocolRevision;

use crate::codes::Code;
use crate::diagnostic::Diagnostic;
use crate::syntax::Span;

/// The `error_code` a policy gets when it does not say.
pub const DEFAULT_ERROR_CODE: i32 = -32010;

/// Where a code is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    /// `error_code N`.
    ErrorCode,
    /// No `error_code`: the default applies.
    DefaultErrorCode,
    /// `code N` in a reason.
    Reason,
    /// `code N` in `reason user.denied`.
    UserDenied,
}

/// A code to suggest instead, for the revision.
pub fn suggested_code(revision: ProtocolRevision) -> i32 {
    match revision {
        ProtocolRevision::V2026_07_28 => -31010,
        _ => DEFAULT_ERROR_CODE,
    }
}

/// The finding for `code` under `revision`, if any.
pub(super) fn check(
    code: i64,
    span: Span,
    revision: ProtocolRevision,
    use_: Use,
) -> Option<Diagnostic> {
    let rev = revision.as_str();
    let suggestion = suggested_code(revision);
    let with_fix = |d: Diagnostic| {
        let alternative = if code == i64::from(suggestion) {
            -32011
        } else {
            suggestion
        };
        let alternative =
            if revision == ProtocolRevision::V2026_07_28 && code == i64::from(suggestion) {
                -31011
            } else {
                alternative
            };
        d.help(format!(
            "use `{alternative}` or another code {}",
            free_band(revision)
        ))
        .fix(
            format!("use `{alternative}`"),
            span,
            alternative.to_string(),
        )
    };
    // A code the table cannot hold is an error on `user.denied` too (the
    // error paths below); only an otherwise valid code is the warning.
    if use_ == Use::UserDenied
        && code != -1
        && mcpolicy_runtime::table::builtin::code_refusal(code, revision, true).is_none()
    {
        return Some(
            Diagnostic::new(
                Code::W0507,
                span,
                format!("`user.denied` answers {code}, but MCP {rev} asks for -1 on a user's refusal"),
                "not the refusal code",
            )
            .help("write `code -1`, or remove `code` (the built-in `user.denied` answers -1)")
            .note("cited: docs/spec/frames.md, \"Codes\": -1 is the code MCP asks clients to use for a refusal of sampling")
            .fix("use `-1`", span, "-1"),
        );
    }
    if i32::try_from(code).is_err() {
        return Some(with_fix(Diagnostic::new(
            Code::E0506,
            span,
            format!("error code {code} does not fit a 32-bit integer"),
            "out of range",
        )));
    }
    if code == -1 {
        if use_ == Use::UserDenied {
            return None;
        }
        return Some(with_fix(
            Diagnostic::new(
                Code::E0505,
                span,
                "-1 is the code MCP reserves for a user refusing sampling",
                "means \"the user said no\"",
            )
            .note(format!(
                "cited: MCP {rev} asks clients to answer a user's refusal of sampling with -1"
            )),
        ));
    }
    let named = match code {
        -32700 => Some("parse error"),
        -32600 => Some("invalid request"),
        -32601 => Some("method not found"),
        -32602 => Some("invalid params"),
        -32603 => Some("internal error"),
        _ => None,
    };
    if let Some(meaning) = named {
        return Some(with_fix(
            Diagnostic::new(
                Code::E0501,
                span,
                format!("{code} is JSON-RPC's \"{meaning}\""),
                "reserved by JSON-RPC 2.0",
            )
            .note("cited: JSON-RPC 2.0, section 5.1 (pre-defined errors)"),
        ));
    }
    if !(-32768..=-32000).contains(&code) {
        return None;
    }
    if !(-32099..=-32000).contains(&code) {
        return Some(with_fix(
            Diagnostic::new(Code::E0502, span, format!("{code} lies in JSON-RPC's reserved range -32768..-32000, outside the server-error band"), "reserved for future use")
                .note("cited: JSON-RPC 2.0 reserves -32768..-32000; only -32099..-32000 is left to implementations"),
        ));
    }
    let spec_use = match (revision, code) {
        (ProtocolRevision::V2026_07_28, -32020) => Some("HeaderMismatch"),
        (ProtocolRevision::V2026_07_28, -32021) => Some("MissingRequiredClientCapability"),
        (ProtocolRevision::V2026_07_28, -32022) => Some("UnsupportedProtocolVersion"),
        (ProtocolRevision::V2026_07_28, -32099..=-32020) => {
            Some("a code reserved for the specification (-32020..-32099)")
        }
        (ProtocolRevision::V2025_06_18 | ProtocolRevision::V2025_11_25, -32002) => {
            Some("resource not found")
        }
        (ProtocolRevision::V2025_11_25, -32042) => Some("URL elicitation required"),
        _ => None,
    };
    if let Some(meaning) = spec_use {
        return Some(with_fix(
            Diagnostic::new(Code::E0503, span, format!("MCP {rev} uses {code}: {meaning}"), format!("used by MCP {rev}"))
                .note(format!("cited: MCP {rev}; a client may parse this code's `data` with the specification's shape")),
        ));
    }
    if revision == ProtocolRevision::V2026_07_28 && (-32019..=-32000).contains(&code) {
        let d = Diagnostic::new(
            Code::W0504,
            span,
            format!("{code} is in the legacy band -32000..-32019 of MCP {rev}"),
            "legacy band",
        )
        .note("cited: MCP 2026-07-28: new application codes SHOULD lie outside -32768..-32000");
        return Some(if use_ == Use::DefaultErrorCode {
            d.help(format!(
                "declare `error_code {suggestion}` or another code outside -32768..-32000"
            ))
        } else {
            with_fix(d)
        });
    }
    None
}

fn free_band(revision: ProtocolRevision) -> &'static str {
    match revision {
        ProtocolRevision::V2026_07_28 => "outside -32768..-32000",
        ProtocolRevision::V2025_11_25 => "in -32099..-32000 other than -32002 and -32042",
        ProtocolRevision::V2025_06_18 => "in -32099..-32000 other than -32002",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker's errors on codes are exactly the codes the table loader
    /// refuses (`table::builtin::code_refusal`), under every revision and
    /// use: the compiler writes no table the runtime refuses, and the
    /// runtime loads no code the compiler would refuse.
    #[test]
    fn errors_are_exactly_the_codes_the_loader_refuses() {
        use mcpolicy_runtime::table::builtin::code_refusal;
        let codes = (-33_000..=-31_000).chain([-1, 0, 1, 2, 32_000, -2]).chain([
            i64::from(i32::MIN),
            i64::from(i32::MIN) - 1,
            i64::from(i32::MAX),
            i64::from(i32::MAX) + 1,
            i64::MIN,
            i64::MAX,
        ]);
        let span = crate::syntax::Span::new(0, 1);
        for code in codes {
            for revision in ProtocolRevision::ALL {
                for use_ in [
                    Use::ErrorCode,
                    Use::DefaultErrorCode,
                    Use::Reason,
                    Use::UserDenied,
                ] {
                    let error = super::check(code, span, revision, use_)
                        .is_some_and(|d| d.severity() == crate::codes::Severity::Error);
                    let refused = code_refusal(code, revision, use_ == Use::UserDenied).is_some();
                    assert_eq!(
                        error,
                        refused,
                        "{code} under {} as {use_:?}",
                        revision.as_str()
                    );
                }
            }
        }
    }

    fn code_of(code: i64, revision: ProtocolRevision) -> Option<Code> {
        check(code, Span::default(), revision, Use::ErrorCode).map(|d| d.code)
    }

    #[test]
    fn bands_by_revision() {
        use ProtocolRevision::*;
        assert_eq!(code_of(-32010, V2025_11_25), None);
        assert_eq!(code_of(-32010, V2026_07_28), Some(Code::W0504));
        assert_eq!(code_of(-31010, V2026_07_28), None);
        assert_eq!(code_of(-32042, V2025_11_25), Some(Code::E0503));
        assert_eq!(code_of(-32042, V2025_06_18), None);
        assert_eq!(code_of(-32042, V2026_07_28), Some(Code::E0503));
        assert_eq!(code_of(-32002, V2025_06_18), Some(Code::E0503));
        assert_eq!(code_of(-32002, V2026_07_28), Some(Code::W0504));
        assert_eq!(code_of(-32600, V2025_11_25), Some(Code::E0501));
        assert_eq!(code_of(-32700, V2025_11_25), Some(Code::E0501));
        assert_eq!(code_of(-32500, V2025_11_25), Some(Code::E0502));
        assert_eq!(code_of(-1, V2025_11_25), Some(Code::E0505));
        assert_eq!(code_of(1 << 40, V2025_11_25), Some(Code::E0506));
        assert_eq!(code_of(42, V2025_11_25), None);
    }
}
