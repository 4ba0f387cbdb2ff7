#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use mcpolicy_runtime::clock::SystemClock;
use mcpolicy_runtime::store::MemoryStore;
use serde_json::json;

use super::*;
use mcpolicy_compiler::db::{self, Database, SourceText};

/// One server per behaviour; the fuzz target (`fuzz/src/proxy.rs`)
/// runs the same policy.
const POLICY: &str = include_str!("../../tests/fixtures/session.mcpolicy");

use crate::capture::Captured as Buf;

struct Rig {
    session: Session,
    server: Buf,
    client: Buf,
    audit: Buf,
}

fn rig(server_id: &str) -> Rig {
    let db = Database::default();
    let source = SourceText::new(&db, "t.mcpolicy".into(), POLICY.into());
    let table = db::lower_file(&db, source).clone().unwrap();
    let policy = mcpolicy_runtime::Policy::verify(table).unwrap();
    let engine = Engine::new(policy, Arc::new(MemoryStore::new()), Arc::new(SystemClock));
    let (server, client, audit) = (Buf::default(), Buf::default(), Buf::default());
    let session = Session::new(
        engine,
        server_id,
        Box::new(server.clone()),
        Box::new(client.clone()),
        Log::to(Box::new(std::io::sink()), server_id),
        Some(Audit::to(Box::new(audit.clone()))),
    );
    Rig {
        session,
        server,
        client,
        audit,
    }
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap()
}

const SAMPLE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100}}"#;

#[test]
fn non_sampling_frames_pass_byte_for_byte() {
    let rig = rig("any");
    let odd = "{ \"jsonrpc\" : \"2.0\", \"id\":1 ,\"method\":\"roots/list\" }\n";
    rig.session.from_server(odd.as_bytes());
    assert_eq!(rig.client.take(), [odd.trim_end()]);
    let from_client = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"roots\":[]}}  \n";
    rig.session.from_client(from_client.as_bytes());
    assert_eq!(rig.server.take(), [from_client.trim_end_matches('\n')]);
    // JSON-RPC allows any result; only MCP's objects are probed.
    for result in [
        "5",
        "[1,{\"a\":2}]",
        "null",
        "\"text\"",
        "{\"resultType\":\"complete\"}",
    ] {
        let frame = format!("{{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{result}}}");
        rig.session.from_server(frame.as_bytes());
        assert_eq!(rig.client.take(), [frame]);
    }
    let twice = r#"{"jsonrpc":"2.0","id":9,"result":{"resultType":"complete","resultType":"input_required"}}"#;
    rig.session.from_server(twice.as_bytes());
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    assert!(!rig.session.take_new_deadline());
    // Garbage from the client is the server's to answer.
    rig.session.from_client(b"not json at all\n");
    assert_eq!(rig.server.take(), ["not json at all"]);
    assert!(rig.audit.take().is_empty());
}

#[test]
fn malformed_server_frames_are_answered_not_forwarded() {
    let rig = rig("any");
    rig.session.from_server(b"{not json\n");
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["error"]["code"], -32700);
    assert_eq!(answer["id"], Value::Null);
    // A batch could hide a sampling request from a proxy that only reads objects.
    rig.session.from_server(format!("[{SAMPLE}]\n").as_bytes());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    // Two `method` members: the client might read the second one.
    rig.session.from_server(
            br#"{"jsonrpc":"2.0","id":3,"method":"roots/list","method":"sampling/createMessage","params":{}}"#,
        );
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    assert!(rig.client.take().is_empty());
}

/// `docs/spec/frames.md`, "Echoing the id", through the proxy: a frame the probe cannot read is
/// still answered with its id when the id can be read and names no
/// request in flight.
#[test]
fn unreadable_frames_are_answered_with_their_readable_id() {
    let rig = rig("asks");
    // Two `method` members hiding a sampling request: the runtime's
    // refusal, with the id.
    let twice = br#"{"jsonrpc":"2.0","id":41,"method":"ping","method":"sampling/createMessage","params":{}}"#;
    rig.session.from_server(twice);
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 41);
    assert_eq!(answer["error"]["code"], -32600);
    // Any request the probe refuses (two `method` members): its id.
    let twice_ping = br#"{"jsonrpc":"2.0","id":"p","method":"ping","method":"roots/list"}"#;
    rig.session.from_server(twice_ping);
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], "p");
    assert!(rig.client.take().is_empty());
    // An id still in flight is never echoed: the answers would cross.
    rig.session.from_server(sample(5, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    let twice_five = br#"{"jsonrpc":"2.0","id":5,"method":"ping","method":"roots/list"}"#;
    rig.session.from_server(twice_five);
    assert_eq!(parse(&rig.server.take()[0])["id"], Value::Null);
}

/// Found by the `proxy` fuzz target: a frame with `method` and an
/// `input_required` result was routed as a request and its sampling
/// entries reached the client undecided under `sampling off`.
#[test]
fn a_frame_that_is_request_and_response_at_once_does_not_pass() {
    let rig = rig("off");
    let both = br#"{"jsonrpc":"2.0","id":1,"method":"allServers","result":{"resultType":"input_required","requestState":"s1","inputRequests":{"k0":{"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}}}}"#;
    rig.session.from_server(both);
    assert!(rig.client.take().is_empty(), "never reaches the client");
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["error"]["code"], -32600);
    let with_error =
        br#"{"jsonrpc":"2.0","id":2,"method":"ping","error":{"code":1,"message":"x"}}"#;
    rig.session.from_server(with_error);
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
}

/// `docs/spec/frames.md`, "Lines and ids through a proxy" (kinds): a
/// notification's method beside an id is neither a request nor a
/// notification. A client that dispatches on the method would read the
/// task's `inputRequests` undecided, so it never passes.
#[test]
fn a_notification_with_an_id_does_not_pass() {
    let rig = rig("off");
    let task = br#"{"jsonrpc":"2.0","id":2,"method":"notifications/tasks","params":{"taskId":"t2","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":60000,"inputRequests":{"k0":{"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100}}}}}"#;
    rig.session.from_server(task);
    assert!(rig.client.take().is_empty(), "never reaches the client");
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["error"]["code"], -32600);
    // Any notification's method, with any id; without the id it passes.
    rig.session
        .from_server(br#"{"jsonrpc":"2.0","id":"n","method":"notifications/message","params":{"level":"info","data":"x"}}"#);
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    let plain = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    rig.session.from_server(plain.as_bytes());
    assert_eq!(rig.client.take(), [plain.to_owned()]);
}

/// `docs/spec/evaluation.md`, "Step 1: Validation", through the proxy: an allowed request whose
/// `maxTokens` is spelt `9e2` or `1e0` goes on with the integer (0,
/// however spelt, is refused: `docs/spec/evaluation.md`, step 1).
#[test]
fn an_integral_max_tokens_goes_on_as_an_integer() {
    let rig = rig("any");
    for (spelt, integer) in [("9e2", 900), ("1e0", 1), ("100.0", 100)] {
        let request = SAMPLE.replace(r#""maxTokens":100"#, &format!(r#""maxTokens":{spelt}"#));
        rig.session.from_server(request.as_bytes());
        let forwarded = rig.client.take();
        assert_eq!(forwarded.len(), 1, "{spelt}");
        assert!(
            forwarded[0].contains(&format!(r#""maxTokens":{integer}"#)),
            "{spelt}: {}",
            forwarded[0]
        );
        rig.session.from_client(
                br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}}"#,
            );
        rig.server.take();
    }
    // A plain integer still goes on byte for byte.
    rig.session.from_server(SAMPLE.as_bytes());
    assert_eq!(rig.client.take(), [SAMPLE.to_owned()]);
}

#[test]
fn an_escaped_method_name_is_still_decided() {
    let rig = rig("off");
    let escaped = SAMPLE.replace("sampling/createMessage", "sampling\\/createMessage");
    rig.session.from_server(escaped.as_bytes());
    assert!(rig.client.take().is_empty(), "never reaches the client");
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 7);
    assert_eq!(
        answer["error"]["data"]["reason"],
        "policy.sampling_disabled"
    );
}

/// Found by the `proxy` fuzz target: an answer to a client's call whose
/// result carries sampling entries in `inputRequests` of no task the proxy
/// follows was found by a search of the raw bytes, and a method spelt
/// `sampling\/createMessage` reached the client undecided under `sampling
/// off`. The probe now reads the result's keys and the entries' methods
/// as the client does, whatever their spelling.
#[test]
fn input_requests_of_no_followed_task_do_not_pass_however_spelt() {
    let rig = rig("off");
    let entry = r#"{"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":100}}"#;
    let answer = |id: u32, key: &str, entry: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"taskId":"t1","status":"working","{key}":{{"k0":{entry}}}}}}}"#
        )
    };
    let spellings = [
        ("inputRequests", entry.to_owned()),
        ("inputRequests", entry.replace("sampling/", "sampling\\/")),
        (
            "inputRequests",
            entry.replace("sampling/", "\\u0073ampling/"),
        ),
        ("input\\u0052equests", entry.to_owned()),
    ];
    for (id, (key, entry)) in (1..).zip(spellings) {
        rig.session.from_client(
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t"}}}}"#
            )
            .as_bytes(),
        );
        rig.server.take();
        rig.session.from_server(answer(id, key, &entry).as_bytes());
        let out = rig.client.take();
        assert_eq!(out.len(), 1, "{key} {entry}");
        let refused = parse(&out[0]);
        assert_eq!(refused["id"], id, "{key} {entry}");
        assert_eq!(refused["error"]["code"], -32603, "{key} {entry}: {refused}");
    }
    // Entries that are not sampling, and a task that is over, pass.
    let elicit = entry.replace("sampling/createMessage", "elicitation/create");
    rig.session
        .from_client(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t"}}"#);
    rig.server.take();
    let other = answer(9, "inputRequests", &elicit).replace("\"k0\"", "\"k\\u0030\"");
    rig.session.from_server(other.as_bytes());
    assert_eq!(rig.client.take(), [other]);
}

/// A client's per-request capabilities (`_meta` under
/// `io.modelcontextprotocol/clientCapabilities`) are read whatever the
/// spelling of the key: encoders that escape `/` write it
/// `io.modelcontextprotocol\/clientCapabilities`, and a search of the raw
/// bytes for the key missed it, keeping the capabilities of an earlier
/// request.
#[test]
fn client_capabilities_are_read_however_the_key_is_spelt() {
    let rig = rig("any");
    let declared = || rig.session.sampling_context.load(Ordering::Relaxed);
    let call = |id: u32, key: &str, capabilities: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"t","_meta":{{"{key}":{capabilities}}}}}}}"#
        )
    };
    let with = r#"{"sampling":{"context":{}}}"#;
    let without = r#"{"sampling":{}}"#;
    for (id, key) in (1..).step_by(2).zip([
        "io.modelcontextprotocol/clientCapabilities",
        "io.modelcontextprotocol\\/clientCapabilities",
        "io.modelcontextprotocol\\u002fclientCapabilities",
    ]) {
        rig.session.from_client(call(id, key, with).as_bytes());
        assert!(declared(), "{key}");
        rig.session
            .from_client(call(id + 1, key, without).as_bytes());
        assert!(!declared(), "{key}");
    }
}

#[test]
fn an_invalid_sampling_request_is_answered_with_its_id() {
    let rig = rig("any");
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","id":"a","method":"sampling/createMessage","params":{"maxTokens":5}}"#,
    );
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], "a");
    assert_eq!(answer["error"]["code"], -32602);
    assert_eq!(parse(&rig.audit.take()[0])["event"], "invalid");
}

#[test]
fn trim_forwards_lowered_params_and_annotates_the_result() {
    let rig = rig("any");
    let wide = SAMPLE.replace(
        "\"maxTokens\":100",
        "\"maxTokens\":5000,\"includeContext\":\"allServers\"",
    );
    rig.session.from_server(wide.as_bytes());
    let forwarded = parse(&rig.client.take()[0]);
    assert_eq!(forwarded["id"], 7);
    assert_eq!(forwarded["params"]["includeContext"], "thisServer");
    assert_eq!(forwarded["params"]["maxTokens"], 1000);
    rig.session.from_client(
            br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"ok"},"usage":{"inputTokens":3,"outputTokens":4}}}"#,
        );
    let result = parse(&rig.server.take()[0]);
    assert_eq!(
        result["result"]["_meta"]["context"]["applied"],
        "thisServer"
    );
    assert_eq!(result["result"]["_meta"]["maxTokens"]["requested"], 5000);
    let audit = parse(&rig.audit.take()[0]);
    assert_eq!(audit["outcome"], "trim");
    assert_eq!(
        audit["applied"],
        json!({"includeContext": "thisServer", "maxTokens": 1000, "modelHints": null})
    );
    assert_eq!(
        audit["reasons"],
        json!(["policy.max_scope", "policy.max_tokens"])
    );
    assert_eq!(audit["trims"]["maxTokens"]["requested"], 5000);
}

#[test]
fn a_refused_consent_is_answered_with_the_policy_frame() {
    let rig = rig("asks");
    rig.session.from_server(SAMPLE.as_bytes());
    assert_eq!(rig.client.take(), [SAMPLE], "forwarded unchanged");
    rig.session
        .from_client(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"User rejected"}}"#);
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["error"]["code"], -1);
    assert_eq!(
        answer["error"]["data"],
        json!({"reason": "user.denied", "server": "asks", "retryable": false})
    );
    // The refusal is stored: the same request is refused without the client.
    rig.session.from_server(SAMPLE.as_bytes());
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0]), answer);
}

#[test]
fn a_missed_deadline_answers_the_server_and_drops_the_late_answer() {
    let rig = rig("slow");
    rig.session.from_server(SAMPLE.as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    assert!(rig.session.take_new_deadline());
    assert!(!rig.session.take_new_deadline());
    assert!(rig.session.next_deadline().is_some());
    rig.session.expire(Instant::now() + Duration::from_secs(1));
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["error"]["data"]["reason"], "policy.deadline");
    let cancel = parse(&rig.client.take()[0]);
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], 7);
    assert!(cancel.get("id").is_none(), "a notification: no id of ours");
    rig.session.from_client(
            br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"late"}}}"#,
        );
    assert!(rig.server.take().is_empty(), "the late answer is dropped");
    assert!(rig.session.next_deadline().is_none());
}

/// A monotonic clock that moves only when the test steps it.
#[derive(Clone)]
struct Stepped {
    base: Instant,
    offset: Arc<Mutex<Duration>>,
}

impl Stepped {
    fn now(&self) -> Instant {
        self.base + *self.offset.lock().unwrap()
    }

    fn step(&self, by: Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

/// [`rig`] on a [`Stepped`] clock: deadlines are measured on it alone,
/// so nothing here depends on how fast the machine runs the test.
fn stepped_rig(server_id: &str) -> (Rig, Stepped) {
    let clock = Stepped {
        base: Instant::now(),
        offset: Arc::default(),
    };
    let mut rig = rig(server_id);
    let moved = clock.clone();
    rig.session = rig.session.with_monotonic(move || moved.now());
    (rig, clock)
}

/// `deadline 10ms`, on the session's clock: an answer 1 ms before the
/// deadline goes on; at the deadline the server is answered
/// `policy.deadline` and the client told to stop, not a moment before.
#[test]
fn the_deadline_is_kept_to_the_millisecond_on_the_session_clock() {
    let (rig, clock) = stepped_rig("slow");
    let decided_at = clock.now();
    rig.session.from_server(sample(7, "late").as_bytes());
    rig.session.from_server(sample(8, "on time").as_bytes());
    assert_eq!(rig.client.take().len(), 2);
    assert_eq!(
        rig.session.next_deadline(),
        Some(decided_at + Duration::from_millis(10))
    );

    clock.step(Duration::from_millis(9));
    rig.session.expire(clock.now());
    assert!(rig.server.take().is_empty(), "answered before the deadline");
    assert!(rig.client.take().is_empty());
    rig.session
        .from_client(result_frame(8, COMPLETION).as_bytes());
    let on_time = parse(&rig.server.take()[0]);
    assert_eq!(on_time["id"], 8);
    assert!(on_time.get("result").is_some(), "{on_time}");

    clock.step(Duration::from_millis(1));
    rig.session.expire(clock.now());
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["error"]["data"]["reason"], "policy.deadline");
    let cancel = parse(&rig.client.take()[0]);
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], 7);

    rig.session
        .from_client(result_frame(7, COMPLETION).as_bytes());
    assert!(rig.server.take().is_empty(), "the late answer is dropped");
    // What is left to wake for is the store's flush, and it clears itself.
    clock.step(STORE_FLUSH_AFTER);
    rig.session.expire(clock.now());
    assert!(rig.session.next_deadline().is_none());
}

/// MCP 2026-07-28: a response carried by the client's retry is on time
/// or late by the session's clock too (it once read the wall clock).
#[test]
fn an_input_response_is_late_by_the_session_clock() {
    let ask = |state: &str, text: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
                "inputRequests": {"s": parse(&sample(5, text))},
                "requestState": state}})
        .to_string()
    };
    let retry = |id: u64, state: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "t", "requestState": state,
                "inputResponses": {"s": parse(COMPLETION)}}})
        .to_string()
    };
    let (rig, clock) = stepped_rig("slow");
    rig.session.from_server(ask("r1", "on time").as_bytes());
    let token = state_token(&rig.client.take()[0]);
    clock.step(Duration::from_millis(10));
    rig.session.from_client(retry(2, &token).as_bytes());
    assert_eq!(
        rig.server.take(),
        [retry(2, "r1")],
        "at the deadline: on time"
    );

    rig.session.from_server(ask("r2", "late").as_bytes());
    let token = state_token(&rig.client.take()[0]);
    clock.step(Duration::from_millis(11));
    rig.session.from_client(retry(3, &token).as_bytes());
    assert!(
        rig.server.take().is_empty(),
        "the late completion is kept back"
    );
    let refusal = parse(&rig.client.take()[0]);
    assert_eq!(refusal["id"], 3, "the client's own call");
    assert_eq!(refusal["error"]["data"]["reason"], "policy.deadline");
}

/// Every decision's audit line carries the engine's cause: the server
/// block (`null` for `defaults`), the statement, the evaluation step.
#[test]
fn audit_lines_carry_the_cause() {
    let cases = [
        (
            "off",
            100,
            json!({"block": "off", "statement": "sampling", "step": 4}),
        ),
        (
            "any",
            5000,
            json!({"block": null, "statement": "max_tokens", "step": 6}),
        ),
        (
            "any",
            100,
            json!({"block": null, "statement": null, "step": 10}),
        ),
        (
            "asks",
            100,
            json!({"block": "asks", "statement": "consent", "step": 9}),
        ),
    ];
    for (server, max_tokens, expected) in cases {
        let rig = rig(server);
        let mut request = parse(SAMPLE);
        request["params"]["maxTokens"] = json!(max_tokens);
        rig.session.from_server(request.to_string().as_bytes());
        let audit = parse(&rig.audit.take()[0]);
        assert_eq!(audit["cause"], expected, "{server}: {audit}");
    }
}

#[test]
fn input_required_denial_answers_the_clients_own_call() {
    let rig = rig("off");
    let result = format!(
        r#"{{"jsonrpc":"2.0","id":42,"result":{{"resultType":"input_required","inputRequests":{{"s":{{"method":"sampling/createMessage","params":{}}}}},"requestState":"r1"}}}}"#,
        parse(SAMPLE)["params"]
    );
    rig.session.from_server(result.as_bytes());
    assert!(rig.server.take().is_empty());
    let answer = parse(&rig.client.take()[0]);
    assert_eq!(answer["id"], 42, "the client's call id, not one of ours");
    assert_eq!(
        answer["error"]["data"]["reason"],
        "policy.sampling_disabled"
    );
}

/// An `inputRequests` key spelt `method` beside a sampling entry: a
/// client reads every key as an entry, so the entry is decided (here
/// refused under `sampling off`), never forwarded undecided. The fuzzer's
/// oracle found it once it read the map on its own.
#[test]
fn an_input_requests_key_named_method_hides_no_entry() {
    let rig = rig("off");
    let result = json!({"jsonrpc": "2.0", "id": "a", "result": {
            "resultType": "input_required", "requestState": "s",
            "inputRequests": {
                "k0": parse(SAMPLE),
                "method": {"status": "working", "taskId": "t1"}}}});
    rig.session.from_server(result.to_string().as_bytes());
    let answer = parse(&rig.client.take()[0]);
    assert_eq!(answer["id"], "a", "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"],
        "policy.sampling_disabled"
    );
    assert!(rig.server.take().is_empty());
}

#[test]
fn input_required_trim_is_annotated_in_the_retry() {
    let rig = rig("any");
    let params = json!({"messages": [], "maxTokens": 50, "includeContext": "allServers"});
    let result = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
            "inputRequests": {"s": {"method": "sampling/createMessage", "params": params}},
            "requestState": "r1"}});
    rig.session.from_server(result.to_string().as_bytes());
    let forwarded = parse(&rig.client.take()[0]);
    assert_eq!(
        forwarded["result"]["inputRequests"]["s"]["params"]["includeContext"], "thisServer",
        "the capability rule is 2026-07-28's; this table is 2025-11-25"
    );
    let token = forwarded["result"]["requestState"].as_str().unwrap();
    let retry = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "t", "requestState": token,
            "inputResponses": {"s": {"role": "assistant", "model": "m",
                                     "content": {"type": "text", "text": "ok"}}}}});
    rig.session.from_client(retry.to_string().as_bytes());
    let sent = parse(&rig.server.take()[0]);
    assert_eq!(
        sent["params"]["requestState"], "r1",
        "the server's own state"
    );
    assert_eq!(
        sent["params"]["inputResponses"]["s"]["_meta"]["context"],
        json!({"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"})
    );
}

#[test]
fn input_required_consent_is_resolved_by_the_retry() {
    let rig = rig("asks");
    let ask = |state: &str, text: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
                "inputRequests": {"s": {"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
                    "maxTokens": 50}}},
                "requestState": state}})
        .to_string()
    };
    // Approved: the retry carries the response and goes on with the
    // server's own state.
    let retry = |state: &str| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "t", "requestState": state, "inputResponses": {"s": {"role": "assistant",
            "model": "m", "content": {"type": "text", "text": "ok"}}}}})
        .to_string()
    };
    rig.session.from_server(ask("r1", "one").as_bytes());
    let token = state_token(&rig.client.take()[0]);
    rig.session.from_client(retry(&token).as_bytes());
    assert_eq!(rig.server.take(), [retry("r1")]);
    // Declined: the retry has no response for the entry.
    rig.session.from_server(ask("r2", "two").as_bytes());
    let token = state_token(&rig.client.take()[0]);
    let declined = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "t", "requestState": token, "inputResponses": {}}})
    .to_string();
    rig.session.from_client(declined.as_bytes());
    assert_eq!(
        rig.server.take().len(),
        1,
        "forwarded for the server to handle"
    );
    let audit: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    let events: Vec<(&str, &str)> = audit
        .iter()
        .map(|l| (l["event"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        events,
        [
            ("decision", "consent"),
            ("consent", "allow"),
            ("decision", "consent"),
            ("consent", "deny")
        ]
    );
    assert_eq!(audit[3]["reason"], "user.denied");
    // The declined request again: refused from the store, on the client's call.
    rig.session.from_server(ask("r3", "two").as_bytes());
    let answer = parse(&rig.client.take()[0]);
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["error"]["data"]["reason"], "user.denied");
}

/// The `requestState` the client was given in a forwarded result.
fn state_token(forwarded: &str) -> String {
    let token = parse(forwarded)["result"]["requestState"].clone();
    token.as_str().unwrap().to_owned()
}

/// Two calls given the same `requestState` by the server, each with
/// its own entry: the retry of one settles only its own entry. The
/// client approves every entry it is shown, so every entry forwarded
/// is a completion run, and `budget 2 requests per day` bounds them.
#[test]
fn calls_sharing_a_request_state_do_not_cross() {
    let rig = rig("pair");
    let ask = |call: u64, key: &str, text: &str| {
        json!({"jsonrpc": "2.0", "id": call, "result": {"resultType": "input_required",
                "inputRequests": {key: parse(&sample(0, text))},
                "requestState": "shared"}})
        .to_string()
    };
    let mut completions = 0;
    for round in 0..4 {
        // Call A gets key `a`, call B key `b`; the server gives both one state.
        let mut forwarded = Vec::new();
        for (call, key) in [(10 * round + 1, "a"), (10 * round + 2, "b")] {
            rig.session
                .from_server(ask(call, key, &format!("{key}{round}")).as_bytes());
            let frame = parse(&rig.client.take()[0]);
            if frame.get("result").is_some() {
                let state = frame["result"]["requestState"].as_str().unwrap().to_owned();
                forwarded.push((call, key, state));
            } else {
                assert_eq!(frame["error"]["data"]["reason"], "policy.budget_exhausted");
            }
        }
        // Each result the client sees names its own round: a state two
        // results share would let one retry settle the other's entry.
        if let [(_, _, a), (_, _, b)] = forwarded.as_slice() {
            assert_ne!(a, b, "two results, one requestState");
        }
        // The client runs every entry it was shown, and retries B first.
        for (call, key, state) in forwarded.into_iter().rev() {
            completions += 1;
            let retry = json!({"jsonrpc": "2.0", "id": call + 100, "method": "tools/call",
                    "params": {"name": "t", "requestState": state,
                        "inputResponses": {key: parse(COMPLETION)}}});
            rig.session.from_client(retry.to_string().as_bytes());
            let sent = parse(&rig.server.take()[0]);
            assert_eq!(sent["params"]["requestState"], "shared", "{sent}");
        }
    }
    assert!(
        completions <= 2,
        "the client ran {completions} completions under `budget 2 requests per day`"
    );
    let audit: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    assert!(
        audit.iter().all(|l| l["reason"] != "user.denied"),
        "the user refused nothing: {audit:?}"
    );
}

/// Large requests the client never answers: the proxy holds them up to
/// the byte bound, then refuses new ones (retryable) and keeps every
/// pending one. Granted requests (the defaults' `consent never`): a
/// flood of consent requests meets the consent cooldown before the
/// bound (`docs/spec/evaluation.md`, "Consent cooldown").
#[test]
fn a_flood_of_large_requests_stops_at_the_byte_bound() {
    let rig = rig("held");
    // The bound lowered to 8 MiB to keep the test fast; the real one
    // (64 MiB) is measured on the release proxy: `docs/performance.md`, "Proxy".
    lock(&rig.session.state).flights = InFlight::with_bytes_bound(8 << 20);
    let text = "x".repeat(1 << 20);
    let (mut forwarded, mut refused) = (0, 0);
    for id in 0..12 {
        rig.session
            .from_server(sample(id, &format!("{id}{text}")).as_bytes());
        forwarded += rig.client.take().len();
        for answer in rig.server.take() {
            let answer = parse(&answer);
            assert_eq!(answer["id"], id);
            assert_eq!(answer["error"]["code"], -32603);
            assert_eq!(answer["error"]["data"]["reason"], "runtime.in_flight_bound");
            assert_eq!(answer["error"]["data"]["retryable"], true);
            refused += 1;
        }
    }
    assert_eq!((forwarded, refused), (7, 5));
    let (_, bytes) = lock(&rig.session.state).flights.held();
    assert!(bytes <= 8 << 20, "{bytes}");
    // The first request is still pending: its answer still decides.
    rig.session.from_client(error_frame(0, -1, "no").as_bytes());
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
}

/// A retry carrying a `requestState` the proxy never minted (the
/// server's own, or a forged token) settles nothing and goes on
/// unchanged; a repeated retry gets the server's state back again.
#[test]
fn an_unknown_request_state_settles_nothing() {
    let rig = rig("asks");
    let ask = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required",
            "inputRequests": {"k": parse(&sample(0, "x"))}}});
    rig.session.from_server(ask.to_string().as_bytes());
    let token = state_token(&rig.client.take()[0]);
    assert_eq!(rig.audit.take().len(), 1, "the decision");
    let retry = |state: &str| {
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "t",
                "requestState": state, "inputResponses": {"k": parse(COMPLETION)}}})
        .to_string()
    };
    for forged in ["", "shared", "mcpolicy.00000000000000000000000000000000"] {
        rig.session.from_client(retry(forged).as_bytes());
        assert_eq!(rig.server.take(), [retry(forged)], "unchanged");
    }
    assert!(rig.audit.take().is_empty(), "nothing settled");
    // The real token: approved, and the server (which sent no state) gets none.
    rig.session.from_client(retry(&token).as_bytes());
    let sent = parse(&rig.server.take()[0]);
    assert!(sent["params"].get("requestState").is_none(), "{sent}");
    assert_eq!(parse(&rig.audit.take()[0])["event"], "consent");
    rig.session.from_client(retry(&token).as_bytes());
    let again = parse(&rig.server.take()[0]);
    assert!(again["params"].get("requestState").is_none(), "{again}");
    assert!(rig.audit.take().is_empty(), "settled once");
}

/// A client `tasks/get` (2026-07-28 tasks extension) of task `task`.
fn task_get(id: u64, task: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task}})
        .to_string()
}

/// The server's answer to `tasks/get` `id`: task `task` waits for the
/// sampling entry `key` with prompt `text`.
fn task_input(id: u64, task: &str, key: &str, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete",
            "taskId": task, "status": "input_required", "ttlMs": 60000,
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "inputRequests": {key: parse(&sample(0, text))}}})
    .to_string()
}

fn task_update(id: u64, task: &str, key: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tasks/update", "params": {
            "taskId": task, "inputResponses": {key: parse(COMPLETION)}}})
    .to_string()
}

/// A sampling request inside a task's `inputRequests`, read by the
/// client from `tasks/get` or `notifications/tasks`, is decided like any
/// other: under `sampling off` it never reaches the client.
#[test]
fn an_extension_task_sampling_entry_is_decided() {
    let rig = rig("off");
    rig.session.from_client(task_get(5, "T").as_bytes());
    assert_eq!(rig.server.take().len(), 1);
    rig.session
        .from_server(task_input(5, "T", "s", "hi").as_bytes());
    let answer = parse(&rig.client.take()[0]);
    assert_eq!(answer["id"], 5, "the client's own call");
    assert_eq!(
        answer["error"]["data"]["reason"],
        "policy.sampling_disabled"
    );
    let notification = json!({"jsonrpc": "2.0", "method": "notifications/tasks",
            "params": parse(&task_input(0, "T", "s", "hi"))["result"]});
    rig.session.from_server(notification.to_string().as_bytes());
    assert!(rig.client.take().is_empty(), "dropped, not forwarded");
}

/// The tasks extension with a server that shares keys: a task id given
/// to two calls is refused on the second; a poll repeated is not decided
/// again; `tasks/update` settles only the entries it answers; a key
/// reused for another request is refused.
#[test]
fn extension_tasks_bind_entries_to_the_task_and_its_call() {
    let rig = rig("pair");
    let created = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "task",
                "taskId": "T", "status": "working", "ttlMs": 60000,
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z"}})
        .to_string()
    };
    rig.session.from_server(created(1).as_bytes());
    assert_eq!(rig.client.take(), [created(1)]);
    rig.session.from_server(created(2).as_bytes());
    let answer = parse(&rig.client.take()[0]);
    assert_eq!(answer["id"], 2);
    assert!(
        answer.get("error").is_some(),
        "a task id names one call's task"
    );
    // Polled twice before the user answers: decided once.
    for poll in [10, 11] {
        rig.session.from_client(task_get(poll, "T").as_bytes());
        rig.session
            .from_server(task_input(poll, "T", "k", "a").as_bytes());
        let forwarded = parse(&rig.client.take()[0]);
        assert_eq!(
            forwarded["result"]["inputRequests"]["k"]["params"]["maxTokens"],
            100
        );
    }
    rig.server.take();
    let decisions = rig.audit.take();
    assert_eq!(
        decisions.len(),
        1,
        "one decision for one entry: {decisions:?}"
    );
    // The same key for another request: refused.
    rig.session.from_client(task_get(12, "T").as_bytes());
    rig.session
        .from_server(task_input(12, "T", "k", "b").as_bytes());
    let answer = parse(&rig.client.take()[0]);
    assert_eq!(answer["id"], 12);
    assert_eq!(answer["error"]["code"], -32600);
    rig.server.take();
    // The client answers it: approved, forwarded.
    rig.session
        .from_client(task_update(13, "T", "k").as_bytes());
    assert_eq!(rig.server.take(), [task_update(13, "T", "k")]);
    let audit = parse(&rig.audit.take()[0]);
    assert_eq!(
        (audit["event"].as_str(), audit["outcome"].as_str()),
        (Some("consent"), Some("allow"))
    );
    // The key again after its answer: refused, never asked twice.
    rig.session.from_client(task_get(14, "T").as_bytes());
    rig.session
        .from_server(task_input(14, "T", "k", "a").as_bytes());
    assert_eq!(parse(&rig.client.take()[0])["error"]["code"], -32600);
    rig.server.take();
    // One reservation per entry: the budget (2 a day) still admits one more.
    rig.session.from_client(task_get(15, "T").as_bytes());
    rig.session
        .from_server(task_input(15, "T", "k2", "c").as_bytes());
    assert!(parse(&rig.client.take()[0]).get("result").is_some());
}

/// A sampling request with prompt `text` and JSON-RPC id `id`.
fn sample(id: u64, text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": 100}})
    .to_string()
}

/// The same, run by the client as a task (MCP 2025-11-25 `params.task`).
fn task_sample(id: u64, text: &str, extra: Value) -> String {
    let mut value = parse(&sample(id, text));
    value["params"]["task"] = json!({"ttl": 300_000});
    if let (Some(params), Value::Object(extra)) = (value["params"].as_object_mut(), extra) {
        params.extend(extra);
    }
    value.to_string()
}

const COMPLETION: &str = r#"{"role":"assistant","model":"m","content":{"type":"text","text":"ok"},"usage":{"inputTokens":3,"outputTokens":4}}"#;

fn result_frame(id: u64, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

fn error_frame(id: u64, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// Only the MCP user rejection (-1) is a refusal (`docs/threat-model.md`,
/// "A broken or slow client").
#[test]
fn a_client_error_is_not_a_refusal() {
    let rig = rig("once");
    rig.session.from_server(sample(7, "hi").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    let failure = error_frame(7, -32603, "upstream LLM API timeout");
    rig.session.from_client(failure.as_bytes());
    assert_eq!(
        rig.server.take(),
        [failure],
        "the client's error, unchanged"
    );
    // The audit closes the consent line it opened: asked, then failed.
    let lines: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    let shape: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["event"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(shape, [("decision", "consent"), ("consent", "failed")]);
    assert_eq!(lines[1]["code"], -32603);
    assert_eq!(lines[1]["id"], 7);
    assert_eq!(lines[1]["identity"], lines[0]["identity"]);
    // Nothing stored, and the one request of today's budget was refunded.
    rig.session.from_server(sample(8, "hi").as_bytes());
    assert_eq!(rig.client.take().len(), 1, "asked again");
    assert!(rig.server.take().is_empty());
    // The user's rejection is still a refusal.
    rig.session
        .from_client(error_frame(8, -1, "User rejected").as_bytes());
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["error"]["data"]["reason"], "user.denied");
    rig.session.from_server(sample(9, "hi").as_bytes());
    assert!(rig.client.take().is_empty());
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
}

/// `proxy/PROXY.md`, "The audit log": a consent the user has not answered
/// when the session ends gets its closing line, outcome `unanswered`, also
/// when the server cancelled it; nothing is refunded (the day's one request
/// stays spent), so ending a session buys the server nothing.
#[test]
fn a_consent_unanswered_at_the_end_is_closed_in_the_audit() {
    let rig = rig("once");
    rig.session.from_server(sample(7, "hi").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    assert_eq!(rig.session.close_unanswered(), 1);
    let lines: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    let shape: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l["event"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(shape, [("decision", "consent"), ("consent", "unanswered")]);
    assert_eq!(lines[1]["id"], 7);
    assert_eq!(lines[1]["via"], "request");
    assert_eq!(lines[1]["identity"], lines[0]["identity"]);
    rig.session.from_server(sample(8, "other").as_bytes());
    assert!(rig.client.take().is_empty());
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["error"]["data"]["reason"], "policy.budget_exhausted");

    let rig = self::rig("asks");
    rig.session.from_server(sample(4, "a").as_bytes());
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#,
    );
    rig.session.from_server(sample(5, "b").as_bytes());
    assert_eq!(rig.session.close_unanswered(), 2);
    let closing: Vec<Value> = rig
        .audit
        .take()
        .iter()
        .map(|l| parse(l))
        .filter(|l| l["event"] == "consent")
        .collect();
    let ids: Vec<&Value> = closing.iter().map(|l| &l["id"]).collect();
    assert_eq!(ids, [&json!(4), &json!(5)]);
    assert!(closing.iter().all(|l| l["outcome"] == "unanswered"));
    assert_eq!(rig.session.close_unanswered(), 0, "closed once");
}

/// A consent request the server cancelled stays tracked for the user's
/// answer for `CANCELLED_LINGER`; when that ends unanswered its prompt is
/// closed `unanswered` in the audit (found by the model test's "every
/// prompt is closed once" invariant: it was dropped without a line).
#[test]
fn a_cancelled_consent_whose_linger_ends_is_closed_unanswered() {
    let (rig, clock) = stepped_rig("asks");
    rig.session.from_server(sample(4, "a").as_bytes());
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#,
    );
    clock.step(crate::inflight::CANCELLED_LINGER - Duration::from_millis(1));
    rig.session.expire(clock.now());
    let before: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    assert!(before.iter().all(|l| l["event"] != "consent"), "{before:?}");
    clock.step(Duration::from_millis(1));
    rig.session.expire(clock.now());
    let closing: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    assert_eq!(closing.len(), 1, "{closing:?}");
    assert_eq!(closing[0]["event"], "consent");
    assert_eq!(closing[0]["outcome"], "unanswered");
    assert_eq!(closing[0]["id"], 4);
    assert_eq!(closing[0]["identity"], before[0]["identity"]);
    assert_eq!(rig.session.close_unanswered(), 0, "closed once");
}

/// A second request with an id still in flight is
/// answered with an error frame, never forwarded, and the first
/// request's answer stays its own.
#[test]
fn a_reused_in_flight_id_is_refused_not_forwarded() {
    let rig = rig("asks");
    rig.session.from_server(sample(5, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    rig.session.from_server(sample(5, "b").as_bytes());
    assert!(rig.client.take().is_empty(), "B never reaches the client");
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 5);
    assert_eq!(answer["error"]["code"], -32600);
    // Any request kind: a ping with the id of the pending sampling too.
    rig.session
        .from_server(br#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#);
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    // The user refuses A: A is what is stored, B can still be asked.
    rig.session
        .from_client(error_frame(5, -1, "User rejected").as_bytes());
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
    rig.session.from_server(sample(6, "a").as_bytes());
    assert!(rig.client.take().is_empty(), "A is refused from the store");
    assert_eq!(rig.server.take().len(), 1);
    rig.session.from_server(sample(5, "b").as_bytes());
    assert_eq!(
        rig.client.take().len(),
        1,
        "B is asked, the id is free again"
    );
}

/// `wire::admit_id`: a number some client reads as another id (`1.0`
/// is `1` to `JSON.parse` and to pydantic) is refused -32600 with the
/// id as written, never forwarded, so the client's answer to it cannot
/// be taken for the answer to the consent request `1`.
#[test]
fn an_id_a_client_would_alias_is_refused_as_written() {
    let rig = rig("asks");
    rig.session.from_server(sample(1, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    for id in [
        "1.0",
        "1e0",
        "1.00",
        "10e-1",
        "-0",
        "123456789012345678901234567890",
        "9007199254740993",
    ] {
        let ping = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        rig.session.from_server(ping.as_bytes());
        assert!(rig.client.take().is_empty(), "{id} is not forwarded");
        let answer = rig.server.take();
        assert!(
            answer[0].starts_with(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32600,"#
            )),
            "{id} echoed as written: {answer:?}"
        );
    }
    // The consent request is still the user's to answer.
    rig.session
        .from_client(error_frame(1, -1, "User rejected").as_bytes());
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
}

/// `wire::for_readers`: a line a reader that also ends lines at a lone
/// CR (Java, .NET, Node `readline`, Python universal newlines) would
/// split into a notification and a sampling request goes on without
/// the CRs; U+2028 inside a string goes on escaped.
#[test]
fn a_lone_cr_never_reaches_the_client() {
    let rig = rig("off");
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":\r{}\r}}\n",
        sample(9, "x\u{2028}y")
    );
    rig.session.from_server(line.as_bytes());
    let out = rig.client.take_lines();
    assert_eq!(out.len(), 1);
    assert!(!out[0].contains(&b'\r'));
    assert!(!String::from_utf8_lossy(&out[0]).contains('\u{2028}'));
    assert_eq!(
        serde_json::from_slice::<Value>(&out[0]).unwrap(),
        serde_json::from_str::<Value>(line.trim_end()).unwrap()
    );
    assert!(rig.server.take().is_empty());
    // Bytes no JSON text holds are refused, not forwarded.
    for bad in [
        &b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\x0b\"params\":{}}"[..],
        b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{\"a\":\"\xff\"}}",
    ] {
        rig.session.from_server(bad);
        assert!(rig.client.take().is_empty());
        assert_eq!(rig.server.take().len(), 1);
    }
}

/// A request the server cancelled stays tracked; the
/// user's refusal is still recorded and nothing reaches the server.
#[test]
fn a_cancelled_request_still_records_the_refusal() {
    let rig = rig("asks");
    rig.session.from_server(sample(7, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
    rig.session.from_server(cancel.as_bytes());
    assert_eq!(rig.client.take(), [cancel], "the client is told");
    // The server may not reuse the id while the client can still answer.
    rig.session.from_server(sample(7, "b").as_bytes());
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    rig.session
        .from_client(error_frame(7, -1, "User rejected").as_bytes());
    assert!(
        rig.server.take().is_empty(),
        "no response after cancellation"
    );
    rig.session.from_server(sample(8, "a").as_bytes());
    assert!(rig.client.take().is_empty(), "refused from the store");
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
}

/// An approval of a cancelled request still settles and,
/// under `consent first`, is remembered; the server hears nothing.
#[test]
fn a_cancelled_request_still_records_the_approval() {
    let rig = rig("first");
    rig.session.from_server(sample(7, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    );
    rig.client.take();
    rig.session
        .from_client(result_frame(7, COMPLETION).as_bytes());
    assert!(
        rig.server.take().is_empty(),
        "no response after cancellation"
    );
    let audit: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    assert_eq!(audit.last().unwrap()["event"], "consent");
    assert_eq!(audit.last().unwrap()["outcome"], "allow");
}

/// The task-creation reply is not the user's answer; a task that fails
/// with MCP's user-rejection message (as clients of the TypeScript SDK
/// report a rejection) is the refusal, stored, and replayed.
#[test]
fn a_failed_sampling_task_is_a_refusal() {
    let rig = rig("first");
    rig.session
        .from_server(task_sample(7, "a", json!({})).as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    let created = result_frame(
        7,
        r#"{"task":{"taskId":"t1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttl":300000}}"#,
    );
    rig.session.from_client(created.as_bytes());
    assert_eq!(
        rig.server.take(),
        [created],
        "the creation reply, unchanged"
    );
    let poll = r#"{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":{"taskId":"t1"}}"#;
    rig.session.from_server(poll.as_bytes());
    assert_eq!(rig.client.take(), [poll]);
    let failed = result_frame(
        8,
        r#"{"taskId":"t1","status":"failed","statusMessage":"User rejected sampling request","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:01Z","ttl":300000}"#,
    );
    rig.session.from_client(failed.as_bytes());
    assert_eq!(rig.server.take(), [failed], "the status goes on");
    // The same request again is refused from the store, task or not.
    rig.session
        .from_server(task_sample(9, "a", json!({})).as_bytes());
    assert!(rig.client.take().is_empty(), "never asked again");
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
}

/// Only the user's word is a refusal: a task that failed for another
/// reason (a provider timeout) stores nothing and refunds its budget,
/// when its `tasks/result` answers with another error, or when its
/// `ttl` passes unanswered; a `failed` task whose `tasks/result` is
/// `-1` is the refusal. `once` admits one request a day, so a refund
/// shows as the same request asked again.
#[test]
fn a_task_that_failed_otherwise_is_not_a_refusal() {
    let (rig, clock) = stepped_rig("once");
    let create = |id: u64, task: &str, ttl: u64| {
        result_frame(
            id,
            &json!({"task": {"taskId": task, "status": "working", "ttl": ttl}}).to_string(),
        )
    };
    let failed = |task: &str, message: &str| {
        json!({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {
                "taskId": task, "status": "failed", "statusMessage": message}})
        .to_string()
    };
    // Failed, then `tasks/result` answers -32603: abandoned, refunded.
    rig.session
        .from_server(task_sample(7, "a", json!({})).as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    rig.session.from_client(create(7, "t1", 300_000).as_bytes());
    rig.session
        .from_client(failed("t1", "provider timeout").as_bytes());
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":"t1"}}"#,
    );
    rig.client.take();
    let error = error_frame(8, -32603, "Task t1 has no result stored");
    rig.session.from_client(error.as_bytes());
    assert_eq!(
        rig.server.take().last().unwrap(),
        &error,
        "the client's own error"
    );
    // Refunded: the same request is asked again (the budget admits one).
    rig.session
        .from_server(task_sample(9, "a", json!({})).as_bytes());
    assert_eq!(rig.client.take().len(), 1, "asked again, not refused");
    assert!(rig.server.take().is_empty());
    // Failed without a word and never fetched: its ttl abandons it.
    rig.session.from_client(create(9, "t2", 1000).as_bytes());
    rig.session.from_client(failed("t2", "oops").as_bytes());
    clock.step(Duration::from_millis(1000));
    rig.session.expire(clock.now());
    rig.server.take();
    rig.session
        .from_server(task_sample(10, "a", json!({})).as_bytes());
    assert_eq!(rig.client.take().len(), 1, "refunded at the ttl");
    // Failed, then `tasks/result` says -1: the user's word, recorded.
    rig.session
        .from_client(create(10, "t3", 300_000).as_bytes());
    rig.session.from_client(failed("t3", "").as_bytes());
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","id":11,"method":"tasks/result","params":{"taskId":"t3"}}"#,
    );
    rig.client.take();
    rig.session
        .from_client(error_frame(11, -1, "User rejected sampling request").as_bytes());
    let answer = parse(rig.server.take().last().unwrap());
    assert_eq!(answer["error"]["data"]["reason"], "user.denied");
    let audit: Vec<Value> = rig.audit.take().iter().map(|l| parse(l)).collect();
    let refusals = audit
        .iter()
        .filter(|l| l["reason"] == "user.denied")
        .count();
    assert_eq!(refusals, 1, "only the -1 is a refusal: {audit:?}");
}

/// After a replayed approval, or under `consent never`, the client may
/// still ask its user: a `-1` is the user's word, recorded as
/// `user.denied` and answered with the policy's frame.
#[test]
fn a_refusal_under_a_grant_is_the_users_word() {
    // `consent never` (the defaults).
    let rig = rig("any");
    rig.session.from_server(sample(1, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1, "allowed, forwarded");
    rig.session
        .from_client(error_frame(1, -1, "User rejected sampling request").as_bytes());
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["error"]["data"]["reason"], "user.denied", "{answer}");
    rig.session.from_server(sample(2, "a").as_bytes());
    assert!(rig.client.take().is_empty(), "never asked again");
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
    // A replayed approval (`consent first`), then the user's -1.
    let rig = rig_first_approved();
    rig.session.from_server(sample(4, "b").as_bytes());
    assert_eq!(rig.client.take().len(), 1, "replayed approval, forwarded");
    rig.session.from_client(error_frame(4, -1, "no").as_bytes());
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
    rig.session.from_server(sample(5, "b").as_bytes());
    assert!(
        rig.client.take().is_empty(),
        "the refusal replaced the approval"
    );
    assert_eq!(
        parse(&rig.server.take()[0])["error"]["data"]["reason"],
        "user.denied"
    );
}

/// `first` with prompt `b` approved by the user (stored `user.approved`).
fn rig_first_approved() -> Rig {
    let rig = rig("first");
    rig.session.from_server(sample(3, "b").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    rig.session
        .from_client(result_frame(3, COMPLETION).as_bytes());
    assert_eq!(rig.server.take().len(), 1);
    rig.audit.take();
    rig
}

/// A `-1` answer to `tasks/result` is the refusal; the
/// server receives the policy's frame on its `tasks/result` id.
#[test]
fn a_rejected_task_result_is_a_refusal() {
    let rig = rig("asks");
    rig.session
        .from_server(task_sample(7, "a", json!({})).as_bytes());
    rig.client.take();
    rig.session
        .from_client(result_frame(7, r#"{"task":{"taskId":"t1","status":"working"}}"#).as_bytes());
    rig.server.take();
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":"t1"}}"#,
    );
    rig.client.take();
    rig.session
        .from_client(error_frame(8, -1, "User rejected sampling request").as_bytes());
    let answer = parse(&rig.server.take()[0]);
    assert_eq!(answer["id"], 8);
    assert_eq!(answer["error"]["data"]["reason"], "user.denied");
    rig.session
        .from_server(task_sample(9, "a", json!({})).as_bytes());
    assert!(rig.client.take().is_empty());
}

/// The trim annotations land on the task's final result
/// (`tasks/result`), not on the creation reply.
#[test]
fn a_trimmed_task_is_annotated_on_its_result() {
    let rig = rig("any");
    rig.session.from_server(
        task_sample(
            7,
            "a",
            json!({"maxTokens": 5000, "includeContext": "allServers"}),
        )
        .as_bytes(),
    );
    let forwarded = parse(&rig.client.take()[0]);
    assert_eq!(forwarded["params"]["maxTokens"], 1000);
    assert_eq!(forwarded["params"]["task"], json!({"ttl": 300_000}));
    let created = result_frame(7, r#"{"task":{"taskId":"t1","status":"working"}}"#);
    rig.session.from_client(created.as_bytes());
    assert_eq!(
        rig.server.take(),
        [created],
        "no _meta on the creation reply"
    );
    rig.session.from_server(
        br#"{"jsonrpc":"2.0","id":8,"method":"tasks/result","params":{"taskId":"t1"}}"#,
    );
    rig.client.take();
    rig.session
        .from_client(result_frame(8, COMPLETION).as_bytes());
    let result = parse(&rig.server.take()[0]);
    assert_eq!(result["id"], 8);
    assert_eq!(result["result"]["_meta"]["maxTokens"]["requested"], 5000);
}

#[test]
fn usage_is_read_from_the_usual_spellings() {
    assert_eq!(
        usage_tokens(&json!({"usage": {"inputTokens": 3, "outputTokens": 4}})),
        Some(7)
    );
    assert_eq!(
        usage_tokens(&json!({"_meta": {"usage": {"total_tokens": 9}}})),
        Some(9)
    );
    assert_eq!(
        usage_tokens(&json!({"usage": {"prompt_tokens": 2}})),
        Some(2)
    );
    assert_eq!(usage_tokens(&json!({"model": "m"})), None);
}

/// `docs/spec/transports.md`, "Resumed streams": a request the server
/// sends again on a stream the client resumed ahead of it reaches the
/// client as it did the first time (the same trim, the same consent
/// request), and nothing is decided, stored or audited again.
#[test]
fn a_request_sent_again_goes_to_the_client_as_first_forwarded() {
    let wide = SAMPLE.replace(
        "\"maxTokens\":100",
        "\"maxTokens\":5000,\"includeContext\":\"allServers\"",
    );
    let odd = "{ \"jsonrpc\" : \"2.0\", \"id\":1 ,\"method\":\"roots/list\" }";
    let cases = [
        ("any", format!("{SAMPLE}\n"), "allowed as written"),
        ("any", wide.clone(), "trimmed"),
        ("asks", sample(5, "a"), "consent asked"),
        ("asks", wide, "consent asked, trimmed"),
        ("first", sample(5, "a"), "consent asked once"),
        ("any", odd.to_owned(), "not sampling"),
    ];
    for (server, frame, what) in cases {
        let mut rig = rig(server);
        rig.session = rig.session.resumable();
        rig.session.from_server(frame.as_bytes());
        let first = rig.client.take();
        assert_eq!(first.len(), 1, "{what}");
        let audited = rig.audit.take();
        rig.session.from_server_again(frame.as_bytes());
        assert_eq!(rig.client.take(), first, "{what}");
        assert!(rig.server.take().is_empty(), "{what}");
        assert!(rig.audit.take().is_empty(), "{what}: decided again");
        // Still one request in flight: one answer settles it.
        assert_eq!(lock(&rig.session.state).flights.len().0, 1, "{what}");
        if !audited.is_empty() {
            let id = parse(&first[0])["id"].as_u64().unwrap();
            rig.session
                .from_client(result_frame(id, COMPLETION).as_bytes());
            assert_eq!(rig.server.take().len(), 1, "{what}");
            assert_eq!(lock(&rig.session.state).flights.len().0, 0, "{what}");
        }
    }
}

/// What is not the same request still forwarded is read as any server
/// message: another text under the id is a reused id (-32600), an id the
/// server cancelled stays refused, an id the client answered is free and
/// its request is decided afresh.
#[test]
fn only_the_same_unanswered_request_is_delivered_again() {
    let mut rig = rig("asks");
    rig.session = rig.session.resumable();
    rig.session.from_server(sample(5, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    rig.audit.take();
    rig.session.from_server_again(sample(5, "b").as_bytes());
    assert!(rig.client.take().is_empty(), "another text");
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
    // A different spelling of the same request is another text.
    let spaced = sample(5, "a").replace(",", ", ");
    rig.session.from_server_again(spaced.as_bytes());
    assert!(rig.client.take().is_empty(), "another spelling");
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);

    rig.session.from_server(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#,
    );
    rig.client.take();
    rig.session.from_server_again(sample(5, "a").as_bytes());
    assert!(rig.client.take().is_empty(), "cancelled");
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);

    let mut rig = self::rig("any");
    rig.session = rig.session.resumable();
    rig.session.from_server(sample(6, "a").as_bytes());
    rig.session
        .from_client(result_frame(6, COMPLETION).as_bytes());
    rig.client.take();
    rig.server.take();
    assert_eq!(rig.audit.take().len(), 1);
    rig.session.from_server_again(sample(6, "a").as_bytes());
    assert_eq!(rig.client.take().len(), 1, "answered: a new request");
    assert_eq!(rig.audit.take().len(), 1, "decided afresh");

    // A notification or a response sent again is read as ever.
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    rig.session.from_server_again(note.as_bytes());
    assert_eq!(rig.client.take(), [note]);
}

/// A session whose transport resumes nothing (stdio) keeps no text of what
/// it forwards: a request sent again is read as any other, so its id, still
/// in flight, is refused.
#[test]
fn without_resumption_a_request_sent_again_is_a_reused_id() {
    let rig = rig("any");
    rig.session.from_server(SAMPLE.as_bytes());
    assert_eq!(rig.client.take().len(), 1);
    rig.session.from_server_again(SAMPLE.as_bytes());
    assert!(rig.client.take().is_empty());
    assert_eq!(parse(&rig.server.take()[0])["error"]["code"], -32600);
}
