//! Re-reads text the grammar could not parse, to say exactly what is wrong:
//! an unknown keyword (with a suggestion), a statement in the wrong place, or
//! the first value that does not fit the statement's shape.

use super::list;
use crate::codes::Code;
use crate::diagnostic::{Diagnostic, Vocabulary, did_you_mean};
use crate::statements::{self, REASON_PROPERTIES, Shape, Statement, StatementDecl, Unit};
use crate::syntax::{BadStmt, Span};

/// Which kind of block the statement was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BlockKind {
    /// `defaults` or `server`.
    Policy,
    /// `reason`.
    Reason,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    /// A word: letters, digits, `_` and `.`.
    Word(&'a str),
    /// A number, with whatever letters follow it directly.
    Number { digits: &'a str, suffix: &'a str },
    /// A complete string literal.
    Str,
    /// A string literal with no closing quote.
    Unterminated,
    /// Anything else: one character.
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token<'a> {
    tok: Tok<'a>,
    span: Span,
    text: &'a str,
}

fn tokenize(text: &str, base: usize) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        let start = i;
        if c == '#' {
            break;
        }
        if c.is_whitespace() {
            i += c.len_utf8();
            continue;
        }
        let tok = if c == '"' {
            i += 1;
            let mut closed = false;
            while i < text.len() {
                match bytes[i] {
                    b'\\' => i += 2,
                    b'"' => {
                        i += 1;
                        closed = true;
                        break;
                    }
                    _ => i += 1,
                }
            }
            i = i.min(text.len());
            while !text.is_char_boundary(i) {
                i += 1;
            }
            if closed { Tok::Str } else { Tok::Unterminated }
        } else if c.is_ascii_digit()
            || (c == '-' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            i += 1;
            while i < text.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'_') {
                i += 1;
            }
            // A decimal fraction is read as part of the number so that it can be explained.
            if bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
                i += 1;
                while i < text.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let digits_end = i;
            while i < text.len() && bytes[i].is_ascii_alphabetic() {
                i += 1;
            }
            Tok::Number {
                digits: &text[start..digits_end],
                suffix: &text[digits_end..i],
            }
        } else if c.is_alphanumeric() || c == '_' {
            while i < text.len() {
                let Some(d) = text[i..].chars().next() else {
                    break;
                };
                if d.is_alphanumeric() || d == '_' || d == '.' || d == '-' {
                    i += d.len_utf8();
                } else {
                    break;
                }
            }
            Tok::Word(&text[start..i])
        } else {
            i += c.len_utf8();
            Tok::Punct(c)
        };
        tokens.push(Token {
            tok,
            span: Span::new(base + start, base + i),
            text: &text[start..i],
        });
    }
    tokens
}

/// The finding for a top-level item whose keyword is right but whose shape is not.
pub(super) fn top_level_item(keyword: &str, text: &str, span: Span) -> Diagnostic {
    let tokens = tokenize(text, span.start);
    let after = tokens.get(1);
    let at = after.map_or(Span::new(span.start, span.start + keyword.len()), |t| {
        t.span
    });
    if keyword == "reason"
        && let Some(Tok::Word(name)) = after.map(|t| &t.tok)
        && let Some(invalid) = invalid_reason_name(name, at)
    {
        return invalid;
    }
    let (message, help) = match keyword {
        "server" => match after.map(|t| &t.tok) {
            Some(Tok::Word(w)) => (
                format!("the server id `{w}` must be quoted"),
                format!("write `server \"{w}\" {{ … }}`"),
            ),
            Some(Tok::Unterminated) => (
                "unterminated string".to_owned(),
                "close the id with `\"`".to_owned(),
            ),
            Some(Tok::Str) => (
                "a server block needs `{ … }` after its id".to_owned(),
                "write `server \"ID\" { sampling on }`".to_owned(),
            ),
            _ => (
                "a server block needs a quoted id and a body".to_owned(),
                "write `server \"ID\" { … }`".to_owned(),
            ),
        },
        "reason" => match after.map(|t| &t.tok) {
            Some(Tok::Word(_)) => (
                "a reason declaration needs a body".to_owned(),
                "write `reason acme.name { retryable false; ttl forever }`".to_owned(),
            ),
            _ => (
                "a reason declaration needs a dotted name and a body".to_owned(),
                "write `reason acme.name { retryable false; ttl forever }`".to_owned(),
            ),
        },
        "defaults" => (
            "`defaults` needs a body".to_owned(),
            "write `defaults { … }`".to_owned(),
        ),
        "mcpolicy" => (
            "the version line is `mcpolicy 1`".to_owned(),
            "write `mcpolicy 1`".to_owned(),
        ),
        "protocol" => (
            "`protocol` takes an MCP revision date".to_owned(),
            "write `protocol 2025-11-25` (or `2025-06-18`, `2026-07-28`)".to_owned(),
        ),
        "error_code" => (
            "`error_code` takes an integer".to_owned(),
            "write `error_code -32010`".to_owned(),
        ),
        _ => (
            "`identity` takes a comma-separated list of request fields".to_owned(),
            "write `identity systemPrompt, messages, includeContext, modelPreferences`".to_owned(),
        ),
    };
    let code = if tokens.iter().any(|t| t.tok == Tok::Unterminated) {
        Code::E0002
    } else {
        Code::E0001
    };
    Diagnostic::new(code, at, message, "cannot read this").help(help)
}

/// The finding for a reason name the grammar cannot read (`acme.café`,
/// `acme.too-big`, `acme.1st`, `acme..x`), or `None` if `name` is one.
/// `span` covers `name`.
pub(super) fn invalid_reason_name(name: &str, span: Span) -> Option<Diagnostic> {
    let mut part_start = true;
    let mut bad = None;
    for (at, c) in name.char_indices() {
        let problem = match c {
            '.' if part_start => Some("a reason name cannot have an empty part".to_owned()),
            '.' => None,
            '0'..='9' if part_start => {
                Some("each part of a reason name starts with a letter or `_`".to_owned())
            }
            c if c.is_ascii_alphanumeric() || c == '_' => None,
            c => Some(format!("`{c}` cannot appear in a reason name")),
        };
        if let Some(message) = problem {
            bad = Some((at, c, message));
            break;
        }
        part_start = c == '.';
    }
    let (at, c, message) = match bad {
        Some(found) => found,
        None if part_start => (
            name.len().saturating_sub(1),
            '.',
            "a reason name cannot end with `.`".to_owned(),
        ),
        None => return None,
    };
    let start = span.start + at;
    let here = Span::new(start, start + c.len_utf8());
    let (suggestion, certain) = nearest_reason_name(name);
    let write = if suggestion.is_empty() {
        "e.g. `acme.too_big`".to_owned()
    } else {
        format!("`{suggestion}`")
    };
    let help = format!("reason names are dotted ASCII identifiers: write {write}");
    let finding = Diagnostic::new(Code::E0412, here, message, "not allowed here").help(help);
    Some(if certain && suggestion.contains('.') {
        finding.fix(format!("Rename to `{suggestion}`"), span, suggestion)
    } else {
        finding
    })
}

/// The valid reason name nearest to `name`: accents dropped (`é` → `e`),
/// anything else outside `[A-Za-z0-9_]` made `_`, empty parts dropped, a
/// part starting with a digit prefixed with `_`. Also says whether the
/// result is certain: only `-` and accents were changed (a character with no
/// ASCII base, made `_`, is a guess).
fn nearest_reason_name(name: &str) -> (String, bool) {
    let mut certain = true;
    let parts: Vec<String> = name
        .split('.')
        .map(|part| {
            let mut out = String::new();
            for c in part.chars() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    out.push(c);
                    continue;
                }
                let mut base = None;
                unicode_normalization::char::decompose_canonical(c, |d| {
                    if base.is_none() && d.is_ascii_alphanumeric() {
                        base = Some(d);
                    }
                });
                certain &= base.is_some() || c == '-';
                out.push(base.unwrap_or('_'));
            }
            if out.starts_with(|c: char| c.is_ascii_digit()) {
                out.insert(0, '_');
            }
            out
        })
        .filter(|part| !part.is_empty())
        .collect();
    (parts.join("."), certain)
}

/// One value a statement expects.
#[derive(Debug, Clone, Copy)]
enum Want {
    Switch,
    Bool,
    /// One of a statement's words (`max_context`, `consent`).
    Words(&'static StatementDecl),
    Count,
    Size,
    Duration,
    Metric,
    Window,
    Per,
    Ttl,
    Str,
    StrList,
    Int,
}

/// What a statement expects, whether it takes `as`, and an example: for a
/// policy statement, from its declaration's shape.
fn shape(keyword: &str) -> Option<(Vec<Want>, bool, &'static str)> {
    use Want::*;
    if let Some(statement) = Statement::from_keyword(keyword) {
        let decl = statement.decl();
        let wants = match decl.shape {
            Shape::Switch => vec![Switch],
            Shape::Word => vec![Words(decl)],
            Shape::Quantity(Unit::Count) => vec![Count],
            Shape::Quantity(Unit::Size) => vec![Size],
            Shape::Quantity(Unit::Duration) => vec![Duration],
            Shape::Rate => vec![Count, Per, Duration],
            Shape::Budget => vec![Count, Metric, Per, Window],
            Shape::Strings => vec![StrList],
        };
        return Some((wants, decl.denies(), decl.example));
    }
    let property = REASON_PROPERTIES
        .iter()
        .find(|p| p.doc.keyword == keyword)?;
    let wants = match keyword {
        "retryable" => vec![Bool],
        "ttl" => vec![Ttl],
        "message" => vec![Str],
        _ => vec![Int],
    };
    Some((wants, false, property.example))
}

/// The finding for a statement the grammar could not read.
pub(super) fn statement(bad: &BadStmt, keyword_span: Span, kind: BlockKind) -> Diagnostic {
    let tokens = tokenize(&bad.text, bad.span.start);
    let Some(first) = tokens.first() else {
        return Diagnostic::new(
            Code::E0002,
            bad.span,
            "expected a statement",
            "not a statement",
        )
        .help("remove it");
    };
    let Tok::Word(word) = first.tok else {
        let shown = if first.text.chars().count() > 20 {
            "this"
        } else {
            first.text
        };
        return Diagnostic::new(
            Code::E0002,
            first.span,
            format!("expected a statement, found `{shown}`"),
            "not a statement",
        )
        .help("statements start with a keyword, like `max_tokens 4096`");
    };
    let policy: Vec<&str> = statements::policy_keywords().collect();
    let reason: Vec<&str> = statements::reason_keywords().collect();
    let (own, other, other_place) = match kind {
        BlockKind::Policy => (&policy, &reason, "a `reason` block"),
        BlockKind::Reason => (&reason, &policy, "a `defaults` or `server` block"),
    };
    if !own.contains(&word) {
        if other.contains(&word) {
            return Diagnostic::new(
                Code::E0102,
                keyword_span,
                format!("`{word}` belongs in {other_place}"),
                "not allowed here",
            )
            .help(format!("this block accepts {}", list(own)));
        }
        if statements::item_keywords().any(|k| k == word) {
            return Diagnostic::new(
                Code::E0102,
                keyword_span,
                format!("`{word}` cannot appear inside a block"),
                "blocks do not nest",
            )
            .help("close the block with `}` before starting another item");
        }
        return Diagnostic::new(
            Code::E0101,
            keyword_span,
            format!("unknown statement `{word}`"),
            "not a statement",
        )
        .suggest(
            word,
            own.iter().copied(),
            keyword_span,
            Vocabulary::Name,
            str::to_owned,
        )
        .unwrap_or_else(|d| d.help(format!("this block accepts {}", list(own))));
    }
    let Some((wants, takes_as, example)) = shape(word) else {
        return Diagnostic::new(
            Code::E0002,
            bad.span,
            format!("cannot read this `{word}` statement"),
            "unreadable",
        );
    };
    let mut rest = tokens[1..].iter().peekable();
    let end = Span::new(bad.span.end, bad.span.end);
    for want in &wants {
        let Some(token) = rest.next() else {
            return Diagnostic::new(
                Code::E0103,
                end,
                format!("`{word}` needs {}", describe(*want)),
                "value missing",
            )
            .help(format!("write it like `{example}`"));
        };
        if let Tok::Number { digits, suffix } = &token.tok
            && digits.contains('.')
        {
            let unit = match (suffix.is_empty(), rest.peek()) {
                (
                    true,
                    Some(Token {
                        tok: Tok::Word(w), ..
                    }),
                ) if units(*want).contains(w) => w,
                _ => suffix,
            };
            return decimal(*want, digits, unit, token.span, word);
        }
        if let (
            Tok::Number { digits, suffix: "" },
            Some(Token {
                tok: Tok::Word(unit),
                span,
                ..
            }),
        ) = (&token.tok, rest.peek())
        {
            if let Some(d) = apart_unit(*want, digits, unit, *span, token.span) {
                return d;
            }
            if matches!(want, Want::Size) {
                rest.next();
                continue;
            }
        }
        if let Some(d) = unquoted(*want, token, bad, word) {
            return d;
        }
        if let Some(d) = unit_without_number(*want, token, bad, word) {
            return d;
        }
        if let Some(d) = mismatch(*want, token, word, example) {
            return d;
        }
        if let Want::StrList = want {
            // `"a", "b"`: commas and strings until the end.
            while let Some(t) = rest.peek().copied() {
                match t.tok {
                    Tok::Punct(',') => {
                        rest.next();
                        match rest.next() {
                            Some(s) if s.tok == Tok::Str => {}
                            Some(s) => {
                                return mismatch(Want::Str, s, word, example)
                                    .unwrap_or_else(|| unexpected(s, word, example));
                            }
                            None => {
                                return Diagnostic::new(
                                    Code::E0002,
                                    t.span,
                                    "trailing `,` in the list",
                                    "nothing follows",
                                )
                                .help(format!("write it like `{example}`"));
                            }
                        }
                    }
                    _ => break,
                }
            }
        }
    }
    if let Some(token) = rest.next() {
        if takes_as && token.tok == Tok::Word("as") {
            return match rest.next() {
                Some(Token {
                    tok: Tok::Word(name),
                    span,
                    ..
                }) if !name.is_empty() => {
                    if let Some(invalid) = invalid_reason_name(name, *span) {
                        return invalid;
                    }
                    match rest.next() {
                        Some(extra) => unexpected(extra, word, example),
                        None => Diagnostic::new(
                            Code::E0002,
                            bad.span,
                            format!("cannot read this `{word}` statement"),
                            "unreadable",
                        )
                        .help(format!("write it like `{example} as acme.reason`")),
                    }
                }
                Some(other) => Diagnostic::new(
                    Code::E0002,
                    other.span,
                    format!("expected a reason name after `as`, found `{}`", other.text),
                    "not a reason name",
                )
                .help("name a reason, like `as acme.too_big`"),
                None => Diagnostic::new(
                    Code::E0002,
                    token.span,
                    "`as` needs a reason name",
                    "reason name missing",
                )
                .help("name a reason, like `as acme.too_big`"),
            };
        }
        if !takes_as && token.tok == Tok::Word("as") {
            return Diagnostic::new(
                Code::E0002,
                token.span,
                format!("`{word}` does not deny, so it cannot name a reason"),
                "`as` not allowed here",
            )
            .help(format!("remove `as …`; write it like `{example}`"));
        }
        return unexpected(token, word, example);
    }
    Diagnostic::new(
        Code::E0002,
        bad.span,
        format!("cannot read this `{word}` statement"),
        "unreadable",
    )
    .help(format!("write it like `{example}`"))
}

fn unexpected(token: &Token<'_>, word: &str, example: &str) -> Diagnostic {
    let shown = if token.text.chars().count() > 30 {
        "this"
    } else {
        token.text
    };
    Diagnostic::new(
        Code::E0002,
        token.span,
        format!("unexpected `{shown}` in `{word}`"),
        "unexpected",
    )
    .help(format!("write it like `{example}`"))
}

fn describe(want: Want) -> String {
    match want {
        Want::Switch => "`on` or `off`".to_owned(),
        Want::Bool => "`true` or `false`".to_owned(),
        Want::Words(decl) => format!("{} ({})", decl.noun, list(&words(want))),
        Want::Count => "a count, like `4096` or `200k`".to_owned(),
        Want::Size => "a size, like `64 KiB`".to_owned(),
        Want::Duration => "a duration, like `60s` or `1m`".to_owned(),
        Want::Metric => "`requests` or `tokens`".to_owned(),
        Want::Window => {
            "a window: `hour`, `day`, `week`, `month` or a duration like `24h`".to_owned()
        }
        Want::Per => "`per`".to_owned(),
        Want::Ttl => "a duration, `until_reset`, `forever` or `none`".to_owned(),
        Want::Str | Want::StrList => "a quoted string".to_owned(),
        Want::Int => "an integer".to_owned(),
    }
}

fn words(want: Want) -> Vec<&'static str> {
    let pairs: &[(&str, &str)] = match want {
        Want::Switch => return vec!["on", "off"],
        Want::Bool => return vec!["true", "false"],
        Want::Words(decl) => decl.values,
        Want::Metric => statements::METRICS,
        Want::Window => return statements::CALENDAR_UNITS.to_vec(),
        Want::Per => return vec!["per"],
        Want::Ttl => return vec!["until_reset", "forever", "none"],
        _ => &[],
    };
    pairs.iter().map(|(word, _)| *word).collect()
}

/// The units a quantity accepts, joined (`60s`) or apart (`64 KiB`).
fn units(want: Want) -> &'static [&'static str] {
    match want {
        Want::Count => &["k", "M"],
        Want::Size => &["B", "KiB", "MiB", "GiB"],
        Want::Duration | Want::Window | Want::Ttl => &["ms", "s", "m", "h", "d"],
        _ => &[],
    }
}

fn mismatch(want: Want, token: &Token<'_>, word: &str, example: &str) -> Option<Diagnostic> {
    let help_example = format!("write it like `{example}`");
    match (&token.tok, want) {
        (Tok::Unterminated, _) => Some(
            Diagnostic::new(
                Code::E0002,
                token.span,
                "unterminated string",
                "no closing `\"`",
            )
            .help("close the string with `\"`"),
        ),
        (Tok::Str, Want::Str | Want::StrList) => None,
        (Tok::Number { .. }, Want::Int) => None,
        (
            Tok::Number { digits, suffix },
            Want::Count | Want::Size | Want::Duration | Want::Window | Want::Ttl,
        ) => {
            let accepted = units(want);
            let unit_span = Span::new(token.span.start + digits.len(), token.span.end);
            if digits.starts_with('-') {
                return Some(negative(word, token.text, token.span));
            }
            if suffix.is_empty() {
                return match want {
                    Want::Count => None,
                    Want::Size => Some(size_without_unit(digits, accepted, token.span, word)),
                    _ => Some(
                        Diagnostic::new(
                            Code::E0103,
                            token.span,
                            format!("`{word}` needs a duration with a unit"),
                            "no unit",
                        )
                        .help(format!(
                            "join a unit to the number: `{digits}s` (units: {})",
                            list(accepted)
                        )),
                    ),
                };
            }
            if accepted.contains(suffix) {
                // Right unit, so something else (usually what follows) is wrong.
                return None;
            }
            let d = Diagnostic::new(
                Code::E0104,
                unit_span,
                format!("unknown unit `{suffix}`"),
                format!("not a unit of {}", kind_of(want)),
            );
            let is_duration = !matches!(want, Want::Count | Want::Size);
            if is_duration
                && let Some(found) = foreign_duration(want, digits, suffix, token.text, token.span)
            {
                return Some(found);
            }
            // A unit spelled out (`24hours`, `5min`) is that unit: a
            // number before it makes it a duration, never a calendar window.
            if let Some(s) = spelled_duration(suffix).filter(|_| is_duration) {
                return Some(d.help(format!("did you mean `{digits}{s}`?")).fix(
                    format!("use `{s}`"),
                    unit_span,
                    s,
                ));
            }
            Some(
                d.suggest(
                    suffix,
                    plausible_units(suffix, accepted),
                    unit_span,
                    Vocabulary::Unit,
                    |s| format!("{digits}{s}"),
                )
                .unwrap_or_else(|d| {
                    d.help(format!("{} units are {}", kind_of(want), list(accepted)))
                }),
            )
        }
        (Tok::Word(w), Want::Size) if units(Want::Size).iter().any(|u| u == w) => None,
        (Tok::Word(w), Want::Size | Want::Duration | Want::Count) => {
            let accepted = units(want);
            let mut d = Diagnostic::new(
                Code::E0103,
                token.span,
                format!("`{word}` needs {}, found `{w}`", describe(want)),
                "wrong kind of value",
            );
            d = match did_you_mean(w, accepted.iter().copied()) {
                Some(s) if matches!(want, Want::Size) => {
                    d.help(format!("did you mean `{s}`? {help_example}"))
                }
                _ => d.help(help_example),
            };
            Some(d)
        }
        (Tok::Word(w), _) if !words(want).is_empty() => {
            let accepted = words(want);
            if accepted.contains(w) {
                return None;
            }
            if matches!(want, Want::Per) {
                return Some(
                    Diagnostic::new(
                        Code::E0002,
                        token.span,
                        format!("expected `per`, found `{w}`"),
                        "expected `per`",
                    )
                    .help(help_example),
                );
            }
            Some(
                Diagnostic::new(
                    Code::E0107,
                    token.span,
                    format!("`{w}` is not {}", describe(want)),
                    "unknown value",
                )
                .suggest(
                    w,
                    accepted.iter().copied(),
                    token.span,
                    Vocabulary::Value,
                    str::to_owned,
                )
                .unwrap_or_else(|d| d.help(format!("write {}", list(&accepted)))),
            )
        }
        (Tok::Word(_), Want::Str | Want::StrList) => Some(
            Diagnostic::new(
                Code::E0103,
                token.span,
                format!("`{word}` takes quoted strings"),
                "not quoted",
            )
            .help(format!("quote it: `\"{}\"`", token.text)),
        ),
        _ => Some(
            Diagnostic::new(
                Code::E0103,
                token.span,
                format!(
                    "`{word}` needs {}, found `{}`",
                    describe(want),
                    short(token.text)
                ),
                "wrong kind of value",
            )
            .help(help_example),
        ),
    }
}

const SPELLED_DURATIONS: &[&str] = &[
    "msec", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes", "hr", "hrs",
    "hour", "hours", "day", "days",
];

/// `1.5s`, `0.5 MiB`, `2.5k`: mcpolicy numbers are whole; say what to write instead.
fn decimal(want: Want, digits: &str, unit: &str, span: Span, word: &str) -> Diagnostic {
    let factor: Option<(f64, &[(u64, &str)])> = match want {
        Want::Duration | Want::Window | Want::Ttl => {
            let ms = match unit {
                "ms" => Some(1.0),
                "s" => Some(1e3),
                "m" => Some(6e4),
                "h" => Some(3.6e6),
                "d" => Some(8.64e7),
                _ => None,
            };
            ms.map(|f| {
                (
                    f,
                    &[
                        (86_400_000, "d"),
                        (3_600_000, "h"),
                        (60_000, "m"),
                        (1_000, "s"),
                        (1, "ms"),
                    ][..],
                )
            })
        }
        Want::Size => {
            let bytes = match unit {
                "B" => Some(1.0),
                "KiB" => Some(1024.0),
                "MiB" => Some(1_048_576.0),
                "GiB" => Some(1_073_741_824.0),
                _ => None,
            };
            bytes.map(|f| {
                (
                    f,
                    &[
                        (1 << 30, " GiB"),
                        (1 << 20, " MiB"),
                        (1 << 10, " KiB"),
                        (1, " B"),
                    ][..],
                )
            })
        }
        Want::Count | Want::Int => {
            let n = match unit {
                "" => Some(1.0),
                "k" => Some(1e3),
                "M" => Some(1e6),
                _ => None,
            };
            n.map(|f| (f, &[(1, "")][..]))
        }
        _ => None,
    };
    let exact = digits
        .replace('_', "")
        .parse::<f64>()
        .ok()
        .zip(factor)
        .and_then(|(value, (f, units))| {
            let base = value * f;
            (base.fract() == 0.0 && base > 0.0 && base < 1e15).then(|| {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let base = base as u64;
                let (size, name) = units
                    .iter()
                    .find(|(size, _)| base.is_multiple_of(*size))
                    .copied()
                    .unwrap_or((1, ""));
                format!("{}{name}", base / size)
            })
        });
    let written = match (unit.is_empty(), want) {
        (true, _) => digits.to_owned(),
        (false, Want::Size) => format!("{digits} {unit}"),
        (false, _) => format!("{digits}{unit}"),
    };
    let d = Diagnostic::new(
        Code::E0103,
        span,
        format!("`{word}` takes whole numbers, found `{written}`"),
        "not a whole number",
    );
    match exact {
        Some(instead) => {
            d.help(format!("write `{instead}`"))
                .fix(format!("write `{instead}`"), span, instead)
        }
        None => d.help("write a whole number, in a smaller unit if needed"),
    }
}

/// One letter is one edit from every other letter: only a change of case
/// (`1S`, `200K`) is a plausible misspelling of a one-letter unit.
fn plausible_units<'a>(written: &str, accepted: &[&'a str]) -> Vec<&'a str> {
    accepted
        .iter()
        .copied()
        .filter(|u| written.chars().count() > 1 || u.eq_ignore_ascii_case(written))
        .collect()
}

/// A size written without a unit (`max_input 65536`): the number read as
/// bytes is the certain fix only from 1 KiB up; below, `64` is as likely
/// 64 KiB as 64 bytes, so both are offered and neither is applied.
fn size_without_unit(digits: &str, accepted: &[&str], span: Span, word: &str) -> Diagnostic {
    let end = Span::new(span.end, span.end);
    let d = Diagnostic::new(
        Code::E0103,
        span,
        format!("`{word}` needs a size with a unit"),
        "no unit",
    )
    .help(size_help(digits, accepted));
    match digits.replace('_', "").parse::<u64>() {
        Ok(n) if n >= 1 << 10 => d.fix(format!("use `{digits} B`"), end, " B"),
        _ => d.choice(format!("use `{digits} B`"), end, " B").choice(
            format!("use `{digits} KiB`"),
            end,
            " KiB",
        ),
    }
}

/// The help for a size written without a unit: the number read as bytes,
/// in the largest unit that states it exactly (`65536` → `64 KiB` or
/// `65536 B`), never the number with a bigger unit glued on.
fn size_help(digits: &str, accepted: &[&str]) -> String {
    let bytes = digits.replace('_', "").parse::<u64>().ok();
    match bytes.map(|n| (n, largest_exact_size(n))) {
        Some((n, (_, "B"))) if n < 1 << 10 => format!(
            "add a unit: `{digits} B` for {n} bytes, or `{digits} KiB` for {} bytes (units: {})",
            n << 10,
            list(accepted)
        ),
        Some((_, (value, unit))) if unit != "B" => format!(
            "add a unit: `{value} {unit}` or `{digits} B` for {digits} bytes (units: {})",
            list(accepted)
        ),
        _ => format!(
            "add a unit: `{digits} B` for {digits} bytes (units: {})",
            list(accepted)
        ),
    }
}

/// `bytes` in the largest binary unit that states it exactly: `65536` →
/// `(64, "KiB")`, `1000` → `(1000, "B")`. The value times the unit is
/// `bytes`, always.
pub(crate) fn largest_exact_size(bytes: u64) -> (u64, &'static str) {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(size, _)| bytes != 0 && bytes.is_multiple_of(*size))
        .map_or((bytes, "B"), |(size, name)| (bytes / size, *name))
}

/// A duration of `ms` milliseconds in the largest unit that states it
/// exactly: `604800000` → `7d`. The value times the unit is `ms`, always.
pub(crate) fn largest_exact_duration(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    UNITS
        .iter()
        .find(|(size, _)| ms != 0 && ms.is_multiple_of(*size))
        .map_or_else(
            || format!("{ms}ms"),
            |(size, name)| format!("{}{name}", ms / size),
        )
}

/// Milliseconds in one of a unit mcpolicy does not take but whose length is
/// fixed: weeks (`w`, `wk`, `week`, `weeks`). Months and years vary, so
/// they are not here.
fn foreign_duration_unit(unit: &str) -> Option<u64> {
    match unit {
        "w" | "wk" | "wks" | "week" | "weeks" | "W" => Some(7 * 86_400_000),
        _ => None,
    }
}

/// The finding for a duration in weeks or months (`1w`, `2 weeks`, `1mo`),
/// which mcpolicy does not take: weeks as the same length in days, months
/// (which vary) as the calendar window where a window is wanted.
fn foreign_duration(
    want: Want,
    digits: &str,
    unit: &str,
    written: &str,
    span: Span,
) -> Option<Diagnostic> {
    let count = digits.replace('_', "").parse::<u64>().ok()?;
    let is_window = matches!(want, Want::Window);
    if let Some(ms) = foreign_duration_unit(unit) {
        let instead = largest_exact_duration(count.checked_mul(ms)?);
        let d = Diagnostic::new(
            Code::E0104,
            span,
            format!("mcpolicy has no week unit: `{written}` is `{instead}`"),
            "weeks are not a unit",
        );
        // One week in a budget's window is a rolling week or the calendar
        // week: which one is the writer's to say.
        return Some(if is_window && count == 1 {
            d.help(format!(
                "write `{instead}` (a rolling week) or `week` (the UTC calendar week, from Monday); `--fix` does not choose"
            ))
            .choice(format!("write `{instead}` (rolling)"), span, instead)
            .choice("write `week` (calendar)", span, "week")
        } else if unit.len() == 1 {
            // `w` is one slip from `s`, `m`, `h` and `d`: `60w` may be
            // `60s` mistyped, and weeks would read it 10,080 times longer.
            d.help(format!(
                "write `{instead}` if `{unit}` means weeks: durations take `ms`, `s`, `m`, `h` or `d`, and `{unit}` is one letter from each, so `--fix` does not choose"
            ))
            .choice(format!("write `{instead}` (weeks)"), span, instead)
        } else {
            d.help(format!(
                "write `{instead}`: durations take `ms`, `s`, `m`, `h` or `d`"
            ))
            .fix(format!("write `{instead}`"), span, instead)
        });
    }
    if matches!(unit, "mo" | "mon" | "month" | "months") {
        let help = if is_window && count == 1 {
            "write `per month` (the calendar month); a rolling window is written in days, like `30d`"
                .to_owned()
        } else {
            "months differ in length; write days, like `30d`".to_owned()
        };
        return Some(
            Diagnostic::new(
                Code::E0104,
                span,
                format!("mcpolicy has no month unit in durations: `{written}`"),
                "months are not a duration unit",
            )
            .help(help),
        );
    }
    None
}

/// A unit word where a duration belongs (`rate 20 per minute`): the
/// finding shows the user's own statement with `1m` in its place.
fn unit_without_number(
    want: Want,
    token: &Token<'_>,
    bad: &BadStmt,
    word: &str,
) -> Option<Diagnostic> {
    let Tok::Word(w) = token.tok else {
        return None;
    };
    if !matches!(want, Want::Duration | Want::Window | Want::Ttl) || words(want).contains(&w) {
        return None;
    }
    let (instead, calendar) = match foreign_duration_unit(w) {
        Some(ms) => (largest_exact_duration(ms), "week"),
        None => {
            let unit = spelled_duration(w)?;
            let calendar = match unit {
                "h" => "hour",
                "d" => "day",
                _ => "",
            };
            (format!("1{unit}"), calendar)
        }
    };
    let start = token.span.start.checked_sub(bad.span.start)?;
    let end = token.span.end.checked_sub(bad.span.start)?;
    let rewritten = format!(
        "{}{instead}{}",
        bad.text.get(..start)?,
        bad.text.get(end..)?
    );
    let rewritten = rewritten.split('#').next().unwrap_or_default().trim();
    let d = Diagnostic::new(
        Code::E0103,
        token.span,
        format!("`{word}` needs a duration, found the unit `{w}` without a number"),
        "a duration is a number and a unit",
    );
    // `per days` in a budget: the calendar `per day` or the rolling `per 1d`,
    // two kinds of window; the writer chooses (docs/spec/language.md, "Fixes").
    if matches!(want, Want::Window) && !calendar.is_empty() {
        return Some(
            d.help(format!(
                "`{w}` is as close to the calendar `per {calendar}` (resets at each UTC {calendar}) as to the rolling `per {instead}`: write the one you mean"
            ))
            .choice(format!("write `{calendar}` (calendar)"), token.span, calendar)
            .choice(format!("write `{instead}` (rolling)"), token.span, instead),
        );
    }
    Some(d.help(format!("write `{rewritten}`")).fix(
        format!("write `{instead}`"),
        token.span,
        instead,
    ))
}

/// Strings written without quotes (`models claude-*, gpt-4o`): the finding
/// quotes each entry whole, globs and all, so the fix keeps the `*`.
fn unquoted(want: Want, token: &Token<'_>, bad: &BadStmt, word: &str) -> Option<Diagnostic> {
    if !matches!(want, Want::Str | Want::StrList)
        || matches!(token.tok, Tok::Str | Tok::Unterminated)
    {
        return None;
    }
    let start = token.span.start.checked_sub(bad.span.start)?;
    let rest = bad.text.get(start..)?.trim_end();
    // A comment ends the statement, unless the `#` is inside a quoted entry.
    let rest = match rest.find('#') {
        Some(at) if !rest[..at].contains('"') => rest[..at].trim_end(),
        _ => rest,
    };
    let pieces: Vec<&str> = if matches!(want, Want::StrList) {
        rest.split(',').map(str::trim).collect()
    } else {
        vec![rest]
    };
    if pieces.iter().any(|p| p.is_empty()) {
        return None;
    }
    let quoted: Vec<String> = pieces.iter().map(|p| quote(p)).collect();
    let quoted = quoted.join(", ");
    let span = Span::new(token.span.start, token.span.start + rest.len());
    Some(
        Diagnostic::new(
            Code::E0103,
            span,
            format!("`{word}` takes quoted strings"),
            "not quoted",
        )
        .help(format!("quote it: `{word} {quoted}`"))
        .fix("quote the strings", span, quoted),
    )
}

/// `text` as a string literal, unless it already is one.
fn quote(text: &str) -> String {
    if text.len() >= 2 && text.starts_with('"') && text.ends_with('"') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A negative number where a count, size or duration belongs.
pub(super) fn negative(word: &str, written: &str, span: Span) -> Diagnostic {
    let refuse = match Statement::from_keyword(word) {
        Some(s) if matches!(s.decl().shape, Shape::Rate | Shape::Budget) => {
            "; to refuse every request, write `sampling off`"
        }
        _ => "",
    };
    Diagnostic::new(
        Code::E0105,
        span,
        format!("`{word}` cannot be negative, found `{written}`"),
        "negative",
    )
    .help(format!(
        "`{word}` counts up from zero: write a positive number{refuse}"
    ))
}

/// The unit a spelled-out duration unit means: `seconds` → `s`.
fn spelled_duration(unit: &str) -> Option<&'static str> {
    if !SPELLED_DURATIONS.contains(&unit) {
        return None;
    }
    Some(match unit {
        "msec" => "ms",
        u if u.starts_with('s') => "s",
        u if u.starts_with('m') => "m",
        u if u.starts_with('h') => "h",
        _ => "d",
    })
}

/// A number followed by a separate word where a unit belongs: `64 KB`, `60 s`.
fn apart_unit(
    want: Want,
    digits: &str,
    unit: &str,
    unit_span: Span,
    number_span: Span,
) -> Option<Diagnostic> {
    let accepted = units(want);
    match want {
        Want::Size if accepted.contains(&unit) => None,
        Want::Size => {
            let d = Diagnostic::new(
                Code::E0104,
                unit_span,
                format!("unknown unit `{unit}`"),
                "not a unit of size",
            )
            .note("sizes take binary units only: `KB` and `MB` would be ambiguous");
            Some(
                d.suggest(
                    unit,
                    plausible_units(unit, accepted),
                    unit_span,
                    Vocabulary::Unit,
                    |s| format!("{digits} {s}"),
                )
                .unwrap_or_else(|d| d.help(format!("size units are {}", list(accepted)))),
            )
        }
        Want::Duration | Want::Window | Want::Ttl if accepted.contains(&unit) => Some(
            Diagnostic::new(
                Code::E0103,
                number_span.to(unit_span),
                format!("write the unit joined to the number: `{digits}{unit}`"),
                "unit apart from its number",
            )
            .help(format!("write `{digits}{unit}`"))
            .fix(
                format!("write `{digits}{unit}`"),
                number_span.to(unit_span),
                format!("{digits}{unit}"),
            ),
        ),
        Want::Duration | Want::Window | Want::Ttl
            if foreign_duration_unit(unit).is_some()
                || matches!(unit, "mo" | "mon" | "month" | "months") =>
        {
            foreign_duration(
                want,
                digits,
                unit,
                &format!("{digits} {unit}"),
                number_span.to(unit_span),
            )
        }
        Want::Duration | Want::Window | Want::Ttl if SPELLED_DURATIONS.contains(&unit) => {
            let suggestion = spelled_duration(unit).unwrap_or("s");
            Some(
                Diagnostic::new(
                    Code::E0104,
                    unit_span,
                    format!("unknown duration unit `{unit}`"),
                    "not a duration unit",
                )
                .help(format!(
                    "write `{digits}{suggestion}` (units: {})",
                    list(accepted)
                ))
                .fix(
                    format!("write `{digits}{suggestion}`"),
                    number_span.to(unit_span),
                    format!("{digits}{suggestion}"),
                ),
            )
        }
        _ => None,
    }
}

fn short(text: &str) -> String {
    if text.chars().count() > 30 {
        format!("{}…", text.chars().take(30).collect::<String>())
    } else {
        text.to_owned()
    }
}

fn kind_of(want: Want) -> &'static str {
    match want {
        Want::Count => "count",
        Want::Size => "size",
        _ => "duration",
    }
}
