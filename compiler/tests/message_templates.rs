//! Message templates, end to end: a random template is checked by the real
//! front end, lowered, loaded by the runtime and rendered by a denial, and
//! compared with a reference reading of `docs/spec/frames.md`, "Messages"
//! (`{{` and `}}` are literal braces, `{name}` a placeholder up to the first
//! `}`). The checker accepts exactly the templates the reference can read
//! (an unknown name, a lone `}` and an unclosed `{` are `E0407`), and for
//! every template it accepts the rendered message is the literal text with
//! the escapes resolved and the placeholders filled.
//!
//! Fast by default; long mode:
//! `PROPTEST_CASES=20000 cargo test -p mcpolicy-compiler --test message_templates`.

use std::sync::Arc;

use mcpolicy_compiler::codes::{Code, Severity};
use mcpolicy_compiler::db::{self, Database, SourceText};
use mcpolicy_runtime::Engine;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::engine::{Answer, ClientContext, Decision};
use mcpolicy_runtime::store::MemoryStore;
use proptest::prelude::*;

const SERVER: &str = "s";
const REASON: &str = "acme.t";

/// The policy whose only server is refused with `template` as the message.
fn policy(template: &str) -> String {
    format!(
        "mcpolicy 1\nreason {REASON} {{ retryable false; message \"{template}\" }}\n\
         defaults {{ consent never }}\nserver \"{SERVER}\" {{ sampling off as {REASON} }}\n"
    )
}

/// The reference: the message a `sampling off` denial of server `s` shows,
/// or `None` when the template is malformed. `sampling off` fills `{server}`
/// and `{reason}` only; the other placeholders have no value for it and stay
/// as written.
fn reference(template: &str) -> Option<String> {
    let chars: Vec<char> = template.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('{', Some('{')) | ('}', Some('}')) => {
                out.push(chars[i]);
                i += 2;
            }
            ('}', _) => return None,
            ('{', _) => {
                let close = (i + 1..chars.len()).find(|&j| chars[j] == '}')?;
                let name: String = chars[i + 1..close].iter().collect();
                match name.as_str() {
                    "server" => out.push_str(SERVER),
                    "reason" => out.push_str(REASON),
                    "limit" | "window" | "resetsAt" | "retryAfter" | "deadline" => {
                        out.push('{');
                        out.push_str(&name);
                        out.push('}');
                    }
                    _ => return None,
                }
                i = close + 1;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The checker's codes for `text`'s errors, and the message its denial
/// shows when there are none.
fn check_and_render(text: &str) -> Result<String, Vec<Code>> {
    let db = Database::default();
    let source = SourceText::new(&db, "template.mcpolicy".into(), text.to_owned());
    let errors: Vec<Code> = db::diagnostics(&db, source)
        .iter()
        .filter(|d| d.severity() == Severity::Error)
        .map(|d| d.code)
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    let table = db::lower_file(&db, source)
        .clone()
        .expect("a clean policy lowers");
    let policy = mcpolicy_runtime::Policy::from_json(table.to_json().as_bytes())
        .expect("a lowered table verifies");
    let clock = Arc::new(ManualClock::new(mcpolicy_runtime::clock::timestamp(
        2026, 3, 10, 15, 30, 0,
    )));
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), clock);
    let request = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage",
        "params": {"messages": [], "maxTokens": 10},
    });
    match engine.decide(
        SERVER,
        request.to_string().as_bytes(),
        &ClientContext::default(),
    ) {
        Answer::Decided {
            decision: Decision::Deny(denial),
            ..
        } => Ok(denial.message()),
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// Pieces that make templates with every brace case: escapes, placeholders
/// known and unknown, lone and unclosed braces, and non-ASCII text.
fn template() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{"),
        Just("}"),
        Just("{{"),
        Just("}}"),
        Just("{server}"),
        Just("{reason}"),
        Just("{deadline}"),
        Just("{retryAfter}"),
        Just("server"),
        Just("reason"),
        Just("x"),
        Just(" "),
        Just("é"),
        Just("'"),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256)
    ))]

    /// The checker accepts a template iff the reference can read it, and an
    /// accepted template renders as the reference says.
    #[test]
    fn accepted_templates_render_their_literal_text(t in template()) {
        let text = policy(&t);
        match (reference(&t), check_and_render(&text)) {
            (Some(expected), Ok(message)) => prop_assert_eq!(message, expected, "template {:?}", t),
            (None, Err(codes)) => prop_assert!(
                codes.iter().all(|c| *c == Code::E0407),
                "template {:?} refused with {:?}", t, codes
            ),
            (Some(expected), Err(codes)) => prop_assert!(
                false, "template {:?} refused with {:?}, expected {:?}", t, codes, expected
            ),
            (None, Ok(message)) => prop_assert!(
                false, "malformed template {:?} accepted, rendered {:?}", t, message
            ),
        }
    }
}

/// The escapes of `E0407`'s explanation, as written there.
#[test]
fn doubled_braces_are_literal_braces() {
    assert_eq!(
        check_and_render(&policy("{{server}} is {server}; {{{reason}}}")),
        Ok("{server} is s; {acme.t}".to_owned())
    );
    assert_eq!(check_and_render(&policy("a } b")), Err(vec![Code::E0407]));
    assert_eq!(check_and_render(&policy("a { b")), Err(vec![Code::E0407]));
}
