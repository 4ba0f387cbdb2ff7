//! Error frames carry the request's id whenever the envelope's id can be
//! read, also when strict parsing failed (`docs/spec/frames.md`, "Echoing the id").

use mcpolicy_runtime::jsonrpc::{INVALID_REQUEST, PARSE_ERROR};
use mcpolicy_runtime::request::{
    IdScan, Limits, Rejection, envelope_id, parse_sampling, parse_sampling_with, read_bounded,
    recover_id,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `default_cases` cases, or `PROPTEST_CASES` from the environment for a
/// long run (`PROPTEST_CASES=100000 cargo test -p mcpolicy-runtime --test …`).
fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn envelope(id: &str, params: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":{params}}}"#)
}

fn rejected(bytes: &[u8]) -> Rejection {
    parse_sampling(bytes).expect_err("must be refused")
}

fn frame_id(rejection: &Rejection) -> Value {
    let frame: Value = serde_json::from_slice(&rejection.reply()).expect("a frame is JSON");
    frame["id"].clone()
}

#[test]
fn strict_parse_failures_keep_a_readable_id() {
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let cases: Vec<(Vec<u8>, i32)> =
        vec![
        (
            envelope("7", r#"{"messages":[],"maxTokens":1,"a":{"x":1,"x":2}}"#).into_bytes(),
            INVALID_REQUEST,
        ),
        (
            envelope("7", r#"{"messages":[],"maxTokens":1,"systemPrompt":"\ud800"}"#)
                .into_bytes(),
            PARSE_ERROR,
        ),
        (
            envelope("7", &format!(r#"{{"messages":{deep},"maxTokens":1}}"#)).into_bytes(),
            PARSE_ERROR,
        ),
        (
            {
                let mut bytes = br#"{"jsonrpc":"2.0","id":7,"params":{"s":"#.to_vec();
                bytes.extend_from_slice(b"\"\xff\xfe\"}}");
                bytes
            },
            PARSE_ERROR,
        ),
        (
            envelope("7", r#"{"messages":[],"maxTokens":1,"n":1e999}"#).into_bytes(),
            PARSE_ERROR,
        ),
        // The id after the damage is read too.
        (
            br#"{"params":{"a":1,"a":2},"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}"#
                .to_vec(),
            INVALID_REQUEST,
        ),
    ];
    for (bytes, code) in cases {
        let rejection = rejected(&bytes);
        assert_eq!(
            rejection.code(),
            code,
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        assert_eq!(
            rejection.id,
            Some(json!(7)),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
        assert_eq!(frame_id(&rejection), json!(7));
    }
}

#[test]
fn an_oversize_request_keeps_its_id() {
    let limits = Limits {
        max_bytes: 64,
        ..Limits::default()
    };
    let text = envelope(
        r#""req-1""#,
        &format!(
            r#"{{"messages":[],"maxTokens":1,"systemPrompt":"{}"}}"#,
            "x".repeat(100)
        ),
    );
    let rejection = parse_sampling_with(text.as_bytes(), &limits).expect_err("too large");
    assert_eq!(rejection.code(), INVALID_REQUEST);
    assert_eq!(rejection.id, Some(json!("req-1")));
    // Streamed from a reader: the true size, and the id from the part not kept.
    let tail_id = format!(
        r#"{{"params":{{"messages":[],"maxTokens":1,"systemPrompt":"{}"}},"id":42}}"#,
        "y".repeat(1000)
    );
    let outcome = read_bounded(&mut tail_id.as_bytes(), &limits).expect("reads");
    let rejection = outcome.expect_err("over the limit");
    assert_eq!(rejection.id, Some(json!(42)));
    assert_eq!(
        rejection.error.to_string(),
        format!(
            "request is {} bytes, larger than the limit of 64 bytes",
            tail_id.len()
        )
    );
    // Within the limit the bytes come back whole.
    let small = br#"{"id":1}"#;
    assert_eq!(
        read_bounded(&mut &small[..], &limits)
            .expect("reads")
            .expect("fits"),
        small.to_vec()
    );
}

#[test]
fn an_id_that_cannot_be_trusted_is_null() {
    for text in [
        // Repeated, also under another spelling.
        r#"{"id":1,"id":1,"params":{}}"#,
        r#"{"id":1,"\u0069d":2,"params":{"a":1,"a":2}}"#,
        r#"{"id":1,"params":{"a":1,"a":2},"i\u0064":1}"#,
        // Not a string or a number.
        r#"{"id":null,"params":{"a":1,"a":2}}"#,
        r#"{"id":{"n":1},"params":{"a":1,"a":2}}"#,
        r#"{"id":[1],"params":{"a":1,"a":2}}"#,
        r#"{"id":true,"params":{"a":1,"a":2}}"#,
        // Unreadable itself.
        r#"{"id":"\ud800","params":{}}"#,
        r#"{"id":1e999,"params":{"a":1,"a":2}}"#,
        // Not JSON, so the set of top-level members is unknown.
        r#"{"id":7,"params":{"a":1,"a":2}"#,
        r#"{"id":7,"params":{"a":1,"a":2}},"#,
        r#"{"id":7,"params":{"a":1,"a":2]}"#,
        r#"{"id":7,"params":{"a":1,"a":2,}}"#,
        r#"{"id":7 "params":{"a":1,"a":2}}"#,
        r#"{"id":7,"params":{"a":01}}"#,
        r#"{"id":7,"params":{"a":"\x"}}"#,
        // The top level is not an object.
        r#"[{"id":7,"a":1,"a":2}]"#,
        // Only nested ids.
        r#"{"params":{"id":7,"a":1,"a":2}}"#,
    ] {
        assert_eq!(recover_id(text.as_bytes()), None, "{text}");
        let rejection = rejected(text.as_bytes());
        assert_eq!(rejection.id, None, "{text}");
        assert_eq!(frame_id(&rejection), Value::Null, "{text}");
    }
    // Invalid UTF-8 inside the id string.
    assert_eq!(recover_id(b"{\"id\":\"\xff\",\"a\":1,\"a\":2}"), None);
}

#[test]
fn odd_but_readable_ids() {
    for (text, id) in [
        (r#"{"\u0069d":5,"a":1,"a":2}"#, json!(5)),
        (
            r#" {"id" : "a\"b\\u00e9" ,"a":1,"a":2} "#,
            json!("a\"b\\u00e9"),
        ),
        (r#"{"id":-1.5e3,"a":[],"a":[]}"#, json!(-1500.0)),
        (
            r#"{"id":18446744073709551615,"a":1,"a":2}"#,
            json!(18446744073709551615u64),
        ),
        (r#"{"id":"\ud83d\ude00","x":"\ud800"}"#, json!("\u{1f600}")),
    ] {
        assert_eq!(recover_id(text.as_bytes()), Some(id), "{text}");
    }
}

/// A valid envelope around a random id and params.
fn valid_request() -> impl Strategy<Value = (Value, String)> {
    let id = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    let text = "\\PC{0,12}";
    (id, text, proptest::collection::vec("[a-z]{1,5}", 0..4)).prop_map(|(id, text, keys)| {
        let mut extra = serde_json::Map::new();
        for (i, key) in keys.into_iter().enumerate() {
            extra.insert(key, json!([i, {"t": i}]));
        }
        let request = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "sampling/createMessage",
            "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
                "maxTokens": 10,
                "extra": extra,
            },
        });
        (
            id_of(&request),
            serde_json::to_string(&request).expect("serialise"),
        )
    })
}

fn id_of(request: &Value) -> Value {
    request["id"].clone()
}

/// Damage that strict parsing refuses but that leaves the document's shape
/// readable, spliced in after `"params":{`.
fn damage() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z]{1,4}".prop_map(|k| format!(r#""{k}":1,"{k}":2,"#).into_bytes()),
        Just("\"\u{e9}\":1,\"e\\u0301\":2,".as_bytes().to_vec()),
        Just(br#""s":"\ud800","#.to_vec()),
        Just(br#""s":"x\udc00y","#.to_vec()),
        (65usize..300)
            .prop_map(|n| format!(r#""deep":{}{},"#, "[".repeat(n), "]".repeat(n)).into_bytes()),
        (65usize..300).prop_map(|n| format!(
            r#""deep":{}1{},"#,
            r#"{"a":"#.repeat(n),
            "}".repeat(n)
        )
        .into_bytes()),
        Just(b"\"bytes\":\"\xff\xc0\x80\",".to_vec()),
        Just(br#""big":1e400,"#.to_vec()),
    ]
}

fn splice(text: &str, damage: &[u8]) -> Vec<u8> {
    let at = text.find(r#""params":{"#).expect("params") + r#""params":{"#.len();
    let mut bytes = text.as_bytes()[..at].to_vec();
    bytes.extend_from_slice(damage);
    bytes.extend_from_slice(&text.as_bytes()[at..]);
    bytes
}

proptest! {
    #![proptest_config(config(256))]

    /// A damaged body around a valid envelope with a readable, unique id:
    /// the error frame carries that id.
    #[test]
    fn damaged_bodies_keep_their_id(
        (id, text) in valid_request(),
        damages in proptest::collection::vec(damage(), 1..3),
        oversize in any::<bool>(),
    ) {
        let mut bytes = text.into_bytes();
        let as_text = String::from_utf8(bytes.clone()).expect("utf8");
        bytes = splice(&as_text, &damages.concat());
        let limits = Limits {
            max_bytes: if oversize { bytes.len() / 2 } else { Limits::default().max_bytes },
            ..Limits::default()
        };
        let rejection = parse_sampling_with(&bytes, &limits).expect_err("damaged");
        prop_assert_eq!(&rejection.id, &Some(id.clone()), "{}", String::from_utf8_lossy(&bytes));
        let frame: Value = serde_json::from_slice(&rejection.reply()).expect("JSON");
        prop_assert_eq!(&frame["id"], &id);
        // Fed in pieces, the scanner agrees.
        let mut scan = IdScan::new(limits.max_bytes);
        for piece in bytes.chunks(7) {
            scan.feed(piece);
        }
        prop_assert_eq!(scan.finish(), Some(id));
    }

    /// The same body with its id given twice never echoes either one.
    #[test]
    fn a_repeated_id_is_never_echoed(
        (id, text) in valid_request(),
        damage in damage(),
        other in any::<u32>(),
    ) {
        let text = text.replacen("{", &format!(r#"{{"id":{other},"#), 1);
        let bytes = splice(&text, &damage);
        prop_assert_eq!(recover_id(&bytes), None);
        prop_assert_eq!(rejected(&bytes).id, None);
        let _ = id;
    }

    /// On any JSON object the strict parser accepts, the tolerant pass reads
    /// the same id as the strict one; and it never panics on any bytes.
    #[test]
    fn agrees_with_the_strict_parser(
        (_, text) in valid_request(),
        cut in any::<prop::sample::Index>(),
        noise in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let value: Value = serde_json::from_str(&text).expect("valid");
        prop_assert_eq!(recover_id(text.as_bytes()), envelope_id(&value).cloned());
        let mut bytes = text.into_bytes();
        bytes.truncate(cut.index(bytes.len() + 1));
        bytes.extend_from_slice(&noise);
        let recovered = recover_id(&bytes);
        if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
            prop_assert_eq!(recovered, envelope_id(&value).cloned());
        }
    }
}
