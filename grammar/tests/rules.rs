//! The grammar on its own: each rule accepts what it should and refuses
//! what it should, the recovery rules (`bad_item`, `bad_stmt`, a missing
//! `}`) cut where the language says, and `file` reads any input at all.

use mcpolicy_grammar::{PolicyParser, Rule};
use pest::Parser;
use pest::iterators::Pair;
use proptest::prelude::*;

/// Whether `rule` matches the whole of `input`.
fn matches_all(rule: Rule, input: &str) -> bool {
    PolicyParser::parse(rule, input).is_ok_and(|mut pairs| {
        pairs
            .next()
            .is_some_and(|p| p.as_rule() == rule && p.as_span().end() == input.len())
    })
}

fn check(rule: Rule, accepts: &[&str], refuses: &[&str]) {
    for input in accepts {
        assert!(matches_all(rule, input), "{rule:?} should accept {input:?}");
    }
    for input in refuses {
        assert!(
            !matches_all(rule, input),
            "{rule:?} should refuse {input:?}"
        );
    }
}

/// The top-level items of a file, as (rule, text), comments left out.
fn items(input: &str) -> Vec<(Rule, String)> {
    let file = PolicyParser::parse(Rule::file, input)
        .expect("file never fails")
        .next()
        .expect("one file pair");
    file.into_inner()
        .filter(|p| !matches!(p.as_rule(), Rule::COMMENT | Rule::EOI))
        .map(|p| (p.as_rule(), p.as_str().to_owned()))
        .collect()
}

/// The statements of a file's blocks, as (rule, text).
fn statements(input: &str) -> Vec<(Rule, String)> {
    fn walk(pair: Pair<'_, Rule>, out: &mut Vec<(Rule, String)>) {
        for inner in pair.into_inner() {
            match inner.as_rule() {
                Rule::policy_body | Rule::reason_body => {
                    for stmt in inner.into_inner() {
                        if !matches!(
                            stmt.as_rule(),
                            Rule::open_brace | Rule::close_brace | Rule::COMMENT
                        ) {
                            out.push((stmt.as_rule(), stmt.as_str().to_owned()));
                        }
                    }
                }
                Rule::defaults_decl | Rule::server_decl | Rule::reason_decl => walk(inner, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for pair in PolicyParser::parse(Rule::file, input).expect("file never fails") {
        walk(pair, &mut out);
    }
    out
}

#[test]
fn values() {
    check(
        Rule::int,
        &["0", "-32010", "1_000", "7__"],
        &["_1", "-", "1.5", "x"],
    );
    check(
        Rule::count,
        &["4096", "200k", "1M", "1_000"],
        &["4096x", "k", "64 KiB", "1m", "200K"],
    );
    check(
        Rule::size,
        &["64 KiB", "64KiB", "1 B", "2\tMiB", "1 GiB"],
        &["64", "64 KB", "64 kib", "KiB"],
    );
    check(
        Rule::duration,
        &["60s", "250ms", "1m", "24h", "7d"],
        &["60", "60 s", "1w", "1.5s", "s"],
    );
    check(
        Rule::string,
        &[r#""""#, r#""a\"b""#, r#""é \u{1F600}""#, r#""\q""#],
        &[r#""abc"#, "\"a\nb\"", "abc"],
    );
    check(
        Rule::revision,
        &["2025-11-25", "2099-01-01"],
        &["2025-1-25", "2025-11-25x", "25-11-25"],
    );
    check(
        Rule::reason_name,
        &["policy.rate_limit", "a.b.c", "_x", "acme"],
        &["a..b", ".a", "1a", "a.", "a-b"],
    );
    check(Rule::switch, &["on", "off"], &["onn", "true", "Off"]);
    check(Rule::boolean, &["true", "false"], &["yes", "True"]);
    check(
        Rule::context_scope,
        &["none", "thisServer", "allServers"],
        &["this_server", "all"],
    );
    check(
        Rule::consent_mode,
        &["always", "first", "never"],
        &["sometimes", "firstly"],
    );
    check(Rule::metric, &["requests", "tokens"], &["request", "bytes"]);
    check(
        Rule::calendar_unit,
        &["hour", "day", "week", "month"],
        &["year", "days"],
    );
}

#[test]
fn keywords_are_whole_words() {
    let keywords = [
        (Rule::kw_mcpolicy, "mcpolicy"),
        (Rule::kw_protocol, "protocol"),
        (Rule::kw_error_code, "error_code"),
        (Rule::kw_identity, "identity"),
        (Rule::kw_reason, "reason"),
        (Rule::kw_defaults, "defaults"),
        (Rule::kw_server, "server"),
        (Rule::kw_sampling, "sampling"),
        (Rule::kw_tools, "tools"),
        (Rule::kw_max_context, "max_context"),
        (Rule::kw_max_input, "max_input"),
        (Rule::kw_max_messages, "max_messages"),
        (Rule::kw_max_tokens, "max_tokens"),
        (Rule::kw_rate, "rate"),
        (Rule::kw_budget, "budget"),
        (Rule::kw_deadline, "deadline"),
        (Rule::kw_consent, "consent"),
        (Rule::kw_models, "models"),
        (Rule::kw_per, "per"),
        (Rule::kw_as, "as"),
        (Rule::kw_retryable, "retryable"),
        (Rule::kw_ttl, "ttl"),
        (Rule::kw_message, "message"),
        (Rule::kw_code, "code"),
    ];
    for (rule, word) in keywords {
        check(
            rule,
            &[word],
            &[
                &format!("{word}x"),
                &format!("{word}_"),
                &format!("{word}1"),
            ],
        );
        assert!(PolicyParser::parse(rule, &format!("{word} x")).is_ok());
    }
}

#[test]
fn policy_statements() {
    check(
        Rule::sampling_stmt,
        &["sampling on", "sampling off as acme.off", "sampling  off"],
        &[
            "sampling",
            "sampling maybe",
            "sampling off as",
            "sampling off x",
        ],
    );
    check(
        Rule::tools_stmt,
        &["tools off", "tools on as acme.t"],
        &["tools", "tools no"],
    );
    check(
        Rule::max_context_stmt,
        &["max_context none", "max_context allServers"],
        &["max_context everything", "max_context none as a.b"],
    );
    check(
        Rule::max_input_stmt,
        &["max_input 64 KiB", "max_input 64KiB as a.b"],
        &["max_input 64", "max_input 64 KB", "max_input"],
    );
    check(
        Rule::max_messages_stmt,
        &["max_messages 50", "max_messages 1k as a.b"],
        &["max_messages fifty", "max_messages 50 KiB"],
    );
    check(
        Rule::max_tokens_stmt,
        &["max_tokens 4096", "max_tokens 8k"],
        &["max_tokens lots", "max_tokens 4096 as a.b"],
    );
    check(
        Rule::rate_stmt,
        &["rate 30 per 1m", "rate 1k per 1h as a.b"],
        &["rate 30 per day", "rate 30 1m", "rate 30 per 1"],
    );
    check(
        Rule::budget_stmt,
        &[
            "budget 50 requests per day",
            "budget 200k tokens per 24h as a.b",
        ],
        &[
            "budget 50 per day",
            "budget 50 requests per year",
            "budget 50 requests",
        ],
    );
    check(
        Rule::deadline_stmt,
        &["deadline 60s", "deadline 250ms as a.b"],
        &["deadline 60", "deadline soon"],
    );
    check(
        Rule::consent_stmt,
        &["consent first", "consent never"],
        &["consent sometimes", "consent"],
    );
    check(
        Rule::models_stmt,
        &[
            r#"models "a""#,
            r#"models "claude-*", "gpt-4o""#,
            r#"models "a" , "b""#,
        ],
        &["models a", r#"models "a","#, "models"],
    );
}

#[test]
fn reason_properties() {
    check(
        Rule::retryable_stmt,
        &["retryable true", "retryable false"],
        &["retryable yes", "retryable"],
    );
    check(
        Rule::ttl_stmt,
        &["ttl 60s", "ttl until_reset", "ttl forever", "ttl none"],
        &["ttl soon", "ttl 60", "ttl"],
    );
    check(
        Rule::message_stmt,
        &[r#"message "Denied: {reason}""#],
        &["message denied", "message"],
    );
    check(
        Rule::code_stmt,
        &["code -32011", "code 1_000"],
        &["code x", "code"],
    );
}

#[test]
fn top_level_items() {
    check(
        Rule::version_decl,
        &["mcpolicy 1", "mcpolicy 2"],
        &["mcpolicy", "mcpolicy one"],
    );
    check(
        Rule::protocol_decl,
        &["protocol 2025-11-25"],
        &["protocol latest"],
    );
    check(
        Rule::error_code_decl,
        &["error_code -32010"],
        &["error_code x"],
    );
    check(
        Rule::identity_decl,
        &["identity messages", "identity systemPrompt, messages"],
        &["identity", "identity messages,"],
    );
    check(
        Rule::reason_decl,
        &["reason a.b { retryable true; ttl 60s }", "reason a.b {}"],
        &["reason a.b", "reason { ttl 1s }"],
    );
    check(
        Rule::defaults_decl,
        &["defaults { max_tokens 4096 }", "defaults {\n}"],
        &["defaults", "defaults max_tokens 4096"],
    );
    check(
        Rule::server_decl,
        &[r#"server "x" { sampling off }"#, r#"server "github-*" {}"#],
        &["server x { sampling off }", r#"server "x""#],
    );
}

#[test]
fn top_start_is_what_starts_an_item() {
    for word in [
        "mcpolicy",
        "protocol",
        "error_code",
        "identity",
        "reason",
        "defaults",
    ] {
        assert!(PolicyParser::parse(Rule::top_start, &format!("{word} x")).is_ok());
        assert!(PolicyParser::parse(Rule::top_start, &format!("{word}x")).is_err());
    }
    for yes in [r#"server "a""#, "server\t\"", "server \u{feff} \""] {
        assert!(PolicyParser::parse(Rule::top_start, yes).is_ok(), "{yes:?}");
    }
    for no in [
        "server x",
        "serverx \"",
        "max_tokens 1",
        "server # \"\n\"",
        " server \"",
    ] {
        assert!(PolicyParser::parse(Rule::top_start, no).is_err(), "{no:?}");
    }
}

#[test]
fn an_unreadable_item_is_a_bad_item_and_the_next_item_survives() {
    let found = items("mcpolicy 1\nservr \"x\" { sampling off }\nserver \"a\" {}\n");
    let rules: Vec<Rule> = found.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        rules,
        [Rule::version_decl, Rule::bad_item, Rule::server_decl]
    );
    assert_eq!(found[1].1, "servr \"x\" { sampling off }");
}

#[test]
fn a_bad_item_takes_its_braces_across_lines_up_to_the_first_close() {
    let found = items("junk {\n  a\n  b\n}\nmcpolicy 1\n");
    assert_eq!(found[0], (Rule::bad_item, "junk {\n  a\n  b\n}".to_owned()));
    assert_eq!(found[1].0, Rule::version_decl);
    // A stray `}` and a block without an item are bad items of their own.
    let found = items("}\n{ x }\nreason foo\n");
    let rules: Vec<Rule> = found.iter().map(|(r, _)| *r).collect();
    assert_eq!(rules, [Rule::bad_item, Rule::bad_item, Rule::bad_item]);
}

#[test]
fn an_unreadable_statement_is_a_bad_stmt_and_the_next_statement_survives() {
    let found = statements("defaults {\n  max_tokens lots\n  rate 3 per 1m; bogus 1 }\n");
    let rules: Vec<Rule> = found.iter().map(|(r, _)| *r).collect();
    assert_eq!(rules, [Rule::bad_stmt, Rule::rate_stmt, Rule::bad_stmt]);
    assert_eq!(found[0].1, "max_tokens lots");
    assert_eq!(found[2].1, "bogus 1 ");
    let found = statements("reason a.b { retryable maybe; ttl 60s }\n");
    let rules: Vec<Rule> = found.iter().map(|(r, _)| *r).collect();
    assert_eq!(rules, [Rule::bad_stmt, Rule::ttl_stmt]);
}

#[test]
fn a_missing_close_brace_ends_the_block_at_the_next_item() {
    let input = "server \"a\" {\n  sampling off\nserver \"b\" { sampling on }\ndefaults {\n  max_tokens 1\n";
    let found = items(input);
    let rules: Vec<Rule> = found.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        rules,
        [Rule::server_decl, Rule::server_decl, Rule::defaults_decl]
    );
    assert!(!found[0].1.contains('}'));
    // The unclosed blocks have no `close_brace`, the closed one has.
    let file = PolicyParser::parse(Rule::file, input)
        .expect("file never fails")
        .next()
        .expect("one file pair");
    let closes: Vec<bool> = file
        .into_inner()
        .filter_map(|item| {
            item.into_inner()
                .find(|p| p.as_rule() == Rule::policy_body)
                .map(|body| body.into_inner().any(|p| p.as_rule() == Rule::close_brace))
        })
        .collect();
    assert_eq!(closes, [false, true, false]);
}

#[test]
fn deep_and_long_inputs_are_read() {
    for input in [
        "{".repeat(100_000),
        "}".repeat(100_000),
        format!("server \"{}\" {{", "x".repeat(1 << 16)),
        "defaults {\n".to_owned() + &"max_tokens 1\n".repeat(10_000),
    ] {
        assert!(PolicyParser::parse(Rule::file, &input).is_ok());
    }
}

/// Text made of the language's own pieces, so that the parser is driven
/// deep into its rules and recovery paths rather than straight to `bad_item`.
fn policy_soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("mcpolicy"),
        Just("protocol"),
        Just("server"),
        Just("defaults"),
        Just("reason"),
        Just("identity"),
        Just("sampling"),
        Just("max_tokens"),
        Just("rate"),
        Just("budget"),
        Just("models"),
        Just("ttl"),
        Just("as"),
        Just("per"),
        Just("requests"),
        Just("day"),
        Just("off"),
        Just("{"),
        Just("}"),
        Just("\""),
        Just("\\"),
        Just(","),
        Just(";"),
        Just("#"),
        Just(" "),
        Just("\t"),
        Just("\n"),
        Just("\r\n"),
        Just("\r"),
        Just("\u{feff}"),
        Just("60s"),
        Just("64 KiB"),
        Just("200k"),
        Just("-1"),
        Just("2025-11-25"),
        Just("a.b"),
        Just("é"),
        Just("\0"),
    ];
    proptest::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
}

/// `file` reads every input to its end: the grammar never fails, whatever
/// the text, and never panics (proptest reports a panic as a failure).
fn reads_to_the_end(input: &str) -> Result<(), TestCaseError> {
    let pairs = PolicyParser::parse(Rule::file, input);
    prop_assert!(pairs.is_ok(), "{:?}", pairs.err());
    let file = pairs.ok().and_then(|mut p| p.next());
    prop_assert_eq!(file.map(|f| f.as_span().end()), Some(input.len()));
    Ok(())
}

proptest! {
    #[test]
    fn file_never_fails_on_arbitrary_text(input in any::<String>()) {
        reads_to_the_end(&input)?;
    }

    #[test]
    fn file_never_fails_on_policy_like_text(input in policy_soup()) {
        reads_to_the_end(&input)?;
    }

    #[test]
    fn recovery_nodes_are_never_empty(input in policy_soup()) {
        for pair in PolicyParser::parse(Rule::file, &input).expect("file never fails").flatten() {
            if matches!(pair.as_rule(), Rule::bad_item | Rule::bad_stmt) {
                prop_assert!(!pair.as_str().is_empty());
            }
        }
    }
}
