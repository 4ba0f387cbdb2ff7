//! A hostile upstream (a real hyper server on a loopback port) sends
//! sampling requests framed to be read two ways: split across chunks, with
//! a lone CR, as two `data` lines, with a duplicate key, with the ambiguous
//! id `1.0`. Each is decided exactly as a client's `EventSource` reads it,
//! or refused; none reaches the client undecided (`docs/threat-model.md`,
//! the parser differential; `docs/spec/frames.md`, "Lines and ids through a
//! proxy"). Also: a denial leaves an id-only event; a stateless upstream
//! gets a gateway-minted session id; the network defences answer with
//! their statuses.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod support;

use hyper::StatusCode;
use mcpolicy_gateway::Limits;
use serde_json::{Value, json};
use support::{Upstream, events, initialize, send, setup, stateful};

fn sampling(id: &str, max_tokens: u32) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"hi"}}}}],"maxTokens":{max_tokens}}}}}"#
    )
}

const CALL: &str =
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}"#;

/// Runs one `tools/call` whose response stream is `chunks`; returns the
/// events the client read.
async fn call(
    up: &Upstream,
    gateway: std::net::SocketAddr,
    route: &str,
    sid: &str,
    chunks: Vec<Vec<u8>>,
) -> Vec<mcpolicy_gateway::sse::Event> {
    *up.script.lock().unwrap() = chunks;
    let answer = send(
        gateway,
        "POST",
        &format!("/{route}/mcp"),
        &[
            ("mcp-session-id", sid),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        CALL,
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.headers.get("content-type").unwrap(),
        "text/event-stream"
    );
    // The canonical form: every event's data on one `data:` line.
    let text = String::from_utf8(answer.body.clone()).unwrap();
    assert!(!text.contains('\r'), "{text:?}");
    for block in text.split("\n\n") {
        assert!(block.matches("data:").count() <= 1, "{text:?}");
    }
    events(&answer.body)
}

fn data(events: &[mcpolicy_gateway::sse::Event]) -> Vec<Value> {
    events
        .iter()
        .filter_map(|e| e.data.as_deref())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Every sampling request the client was shown carries the policy's
/// `max_tokens 20`, never the 50 the server asked for.
fn all_decided(shown: &[Value]) {
    for message in shown {
        if message["method"] == "sampling/createMessage" {
            assert_eq!(message["params"]["maxTokens"], 20, "{message}");
        }
    }
}

fn error_for(body: &Value, id: &Value) -> bool {
    body["id"] == *id && body.get("error").is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framings_that_read_two_ways_are_decided_as_the_client_reads_them() {
    let (up, gateway) = stateful(Limits::default()).await;
    let sid = initialize(gateway.addr, "h").await;
    assert_eq!(sid, "s1");

    // Split across chunks, every 7 bytes (the CRLF split too).
    let event = format!("id: a\r\ndata: {}\r\n\r\n", sampling("11", 50));
    let chunks = event.as_bytes().chunks(7).map(<[u8]>::to_vec).collect();
    let shown = call(&up, gateway.addr, "h", &sid, chunks).await;
    let frames = data(&shown);
    assert_eq!(frames.len(), 1, "{shown:?}");
    assert_eq!(frames[0]["id"], 11);
    assert_eq!(shown[0].id.as_deref(), Some("a"));
    all_decided(&frames);

    // A lone CR ends the line (and the event): decided as one request.
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![format!("data: {}\r\r", sampling("12", 50)).into_bytes()],
    )
    .await;
    let frames = data(&shown);
    assert_eq!(frames.len(), 1, "{shown:?}");
    assert_eq!(frames[0]["id"], 12);
    all_decided(&frames);

    // A lone CR inside the JSON: an EventSource ends the data line there,
    // so the data is `{"jsonrpc":"2.0","id":13,` — not JSON. Refused to the
    // server, nothing to the client (a reader splitting on LF alone would
    // have seen a whole sampling request).
    let split = sampling("13", 50).replacen(",\"method\"", ",\r\"method\"", 1);
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![format!("data: {split}\n\n").into_bytes()],
    )
    .await;
    assert_eq!(data(&shown), Vec::<Value>::new(), "{shown:?}");
    up.wait_for("the -32700 for the cut frame", |b| {
        b["error"]["code"] == -32700
    })
    .await;

    // Two data lines: joined with LF, one JSON text, decided.
    let two = sampling("14", 50).replacen(",\"method\"", ",\ndata: \"method\"", 1);
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![format!("data: {two}\n\n").into_bytes()],
    )
    .await;
    let frames = data(&shown);
    assert_eq!(frames.len(), 1, "{shown:?}");
    assert_eq!(frames[0]["id"], 14);
    all_decided(&frames);

    // A duplicate key: readers disagree on which `params` counts; refused.
    let duplicate = sampling("15", 5).replacen(
        "\"params\":",
        "\"params\":{\"messages\":[],\"maxTokens\":50000},\"params\":",
        1,
    );
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![format!("data: {duplicate}\n\n").into_bytes()],
    )
    .await;
    assert_eq!(data(&shown), Vec::<Value>::new(), "{shown:?}");
    up.wait_for("the refusal of the duplicate key", |b| {
        error_for(b, &Value::from(15))
    })
    .await;

    // The id `1.0`: the TypeScript SDK reads it as `1`; refused, echoed as
    // written.
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![format!("data: {}\n\n", sampling("1.0", 50)).into_bytes()],
    )
    .await;
    assert_eq!(data(&shown), Vec::<Value>::new(), "{shown:?}");
    // The refusal is the gateway's own POST, which may land after the
    // stream the client read has ended.
    up.wait_for("the refusal of id 1.0", |b| {
        b["id"] == json!(1.0) && b.get("error").is_some()
    })
    .await;
    let received = up.received.lock().unwrap().clone();
    assert!(
        received
            .iter()
            .any(|(_, _, body)| body.starts_with(br#"{"jsonrpc":"2.0","id":1.0,"error""#)),
        "{:?}",
        up.bodies()
    );

    // Every frame the gateway wrote went to the session the client named,
    // with its protocol version.
    let own: Vec<_> = received
        .iter()
        .filter(|(_, _, body)| body.windows(7).any(|w| w == b"\"error\""))
        .collect();
    assert!(!own.is_empty());
    for (_, headers, _) in own {
        assert!(headers.contains(&("mcp-session-id".into(), "s1".into())));
        assert!(headers.contains(&("mcp-protocol-version".into(), "2025-06-18".into())));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_leaves_an_id_only_event_and_the_server_gets_the_denial() {
    let (up, gateway) = stateful(Limits::default()).await;
    let sid = initialize(gateway.addr, "tiny").await;
    let shown = call(
        &up,
        gateway.addr,
        "tiny",
        &sid,
        vec![format!("id: ev-7\ndata: {}\n\n", sampling("16", 50)).into_bytes()],
    )
    .await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].id.as_deref(), Some("ev-7"));
    assert_eq!(shown[0].data, None);
    let denial = up
        .wait_for("the denial", |b| error_for(b, &Value::from(16)))
        .await;
    assert_eq!(denial["error"]["code"], -32010, "{denial}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_upstream_gets_a_gateway_minted_session_it_never_sees() {
    let (up, gateway) = setup(Upstream::default(), Limits::default()).await;
    let sid = initialize(gateway.addr, "h").await;
    assert!(sid.starts_with("mcpolicy-gw-"), "{sid}");
    // The session decides: a sampling request on the minted session is trimmed.
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![format!("data: {}\n\n", sampling("21", 50)).into_bytes()],
    )
    .await;
    let frames = data(&shown);
    assert_eq!(frames.len(), 1);
    all_decided(&frames);
    let answer = send(
        gateway.addr,
        "DELETE",
        "/h/mcp",
        &[("mcp-session-id", &sid)],
        "",
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    let received = up.received.lock().unwrap().clone();
    assert!(
        received.iter().all(|(method, headers, _)| method == "POST"
            && headers.iter().all(|(name, _)| name != "mcp-session-id")),
        "{received:?}"
    );
    assert!(gateway.log.text().contains("ended: the client deleted it"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_defences_answer_with_their_statuses() {
    let (up, gateway) = stateful(Limits {
        max_body: 4096,
        ..Limits::default()
    })
    .await;
    let addr = gateway.addr;
    let origin = format!("http://localhost:{}", addr.port());
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;

    let answer = send(addr, "POST", "/h/mcp", &[("origin", &origin)], init).await;
    assert_eq!(answer.status, StatusCode::OK);
    for bad in ["http://evil.example", "null", "http://localhost:1"] {
        let answer = send(addr, "POST", "/h/mcp", &[("origin", bad)], init).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{bad}");
        let error: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(error["error"]["code"], -32600);
    }
    let answer = send(addr, "POST", "/h/mcp", &[("host", "evil.example")], init).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);

    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{{"pad":"{}"}}}}"#,
        "x".repeat(5000)
    );
    let answer = send(addr, "POST", "/h/mcp", &[("mcp-session-id", "s1")], &big).await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);

    let answer = send(addr, "POST", "/h/mcp", &[("mcp-session-id", "s1")], "[]").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let answer = send(addr, "POST", "/nope/mcp", &[], init).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    let answer = send(addr, "PUT", "/h/mcp", &[], init).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    // A preflight goes to the upstream (this one answers 405 to anything
    // but POST); one from a foreign origin does not.
    let answer = send(addr, "OPTIONS", "/h/mcp", &[("origin", &origin)], "").await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    let answer = send(
        addr,
        "OPTIONS",
        "/h/mcp",
        &[("origin", "http://evil.example")],
        "",
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);

    // Every refused request stopped at the gateway.
    let received: Vec<String> = up
        .received
        .lock()
        .unwrap()
        .iter()
        .map(|(method, _, _)| method.clone())
        .collect();
    assert_eq!(received, ["POST", "OPTIONS"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_past_the_bound_is_dropped_and_answered_its_id_kept() {
    let (up, gateway) = stateful(Limits {
        max_event: 1024,
        ..Limits::default()
    })
    .await;
    let sid = initialize(gateway.addr, "h").await;
    let big = sampling("41", 50).replace("\"hi\"", &format!("\"{}\"", "x".repeat(2000)));
    let shown = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![
            format!("id: big\ndata: {big}\n\n").into_bytes(),
            format!("data: {}\n\n", sampling("42", 50)).into_bytes(),
        ],
    )
    .await;
    // The overlong event leaves its id; the next one is decided as usual.
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0].id.as_deref(), Some("big"));
    assert_eq!(shown[0].data, None);
    let frames = data(&shown);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0]["id"], 42);
    all_decided(&frames);
    let refusal = up
        .wait_for("the refusal of the overlong event", |b| {
            b["error"]["code"] == -32600 && b["id"].is_null()
        })
        .await;
    assert!(
        refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than 1024 bytes"),
        "{refusal}"
    );
    assert!(
        gateway
            .log
            .text()
            .contains("server sent an event over 1024 bytes")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loose_content_type_is_still_decided_and_a_redirect_is_refused() {
    let (up, gateway) = stateful(Limits::default()).await;
    let sid = initialize(gateway.addr, "h").await;
    let headers = [("mcp-session-id", sid.as_str())];
    // The TypeScript SDK reads any content type containing
    // `text/event-stream` as SSE: so does the gateway, and it says so.
    *up.script.lock().unwrap() = vec![format!("data: {}\n\n", sampling("51", 50)).into_bytes()];
    let sneaky = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"sneaky"}}"#;
    let answer = send(gateway.addr, "POST", "/h/mcp", &headers, sneaky).await;
    assert_eq!(
        answer.headers.get("content-type").unwrap(),
        "text/event-stream"
    );
    let frames = data(&events(&answer.body));
    assert_eq!(frames.len(), 1);
    all_decided(&frames);
    // A redirect would take the client around the gateway.
    let redirect = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"redirect"}}"#;
    let answer = send(gateway.addr, "POST", "/h/mcp", &headers, redirect).await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(answer.headers.get("location").is_none());
    let error: Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(error["id"], 9);
}

/// Resumes the session's stream after `last` with a GET on which the
/// upstream replays `chunks`; returns the events the client read.
async fn resume(
    up: &Upstream,
    gateway: std::net::SocketAddr,
    sid: &str,
    last: &str,
    chunks: Vec<Vec<u8>>,
) -> Vec<mcpolicy_gateway::sse::Event> {
    *up.get_script.lock().unwrap() = Some(chunks);
    let answer = send(
        gateway,
        "GET",
        "/h/mcp",
        &[
            ("mcp-session-id", sid),
            ("mcp-protocol-version", "2025-06-18"),
            ("last-event-id", last),
        ],
        "",
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    events(&answer.body)
}

/// `docs/spec/transports.md`, "Resumed streams": a sampling request the
/// upstream replays on a stream resumed from before the event that
/// carried it (the client never received it) reaches the client again as
/// first forwarded, decided once; replayed after that event (the client
/// had it), or with another text under its id, it is a reused id: refused
/// to the server, never shown to the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_stream_delivers_again_only_what_the_client_never_received() {
    let (up, gateway) = stateful(Limits::default()).await;
    let sid = initialize(gateway.addr, "h").await;
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    let request = sampling("21", 50);
    let replay = || vec![format!("id: e2\ndata: {request}\n\n").into_bytes()];
    let first = call(
        &up,
        gateway.addr,
        "h",
        &sid,
        vec![
            format!("id: e1\ndata: {note}\n\n").into_bytes(),
            format!("id: e2\ndata: {request}\n\n").into_bytes(),
        ],
    )
    .await;
    let frames = data(&first);
    assert_eq!(frames.len(), 2, "{first:?}");
    let forwarded = frames[1].clone();
    assert_eq!(forwarded["params"]["maxTokens"], 20, "trimmed");

    // The client had only e1: e2 again, exactly as first forwarded.
    for round in 0..2 {
        let again = resume(&up, gateway.addr, &sid, "e1", replay()).await;
        assert_eq!(
            data(&again),
            std::slice::from_ref(&forwarded),
            "round {round}"
        );
        assert_eq!(again[0].id.as_deref(), Some("e2"));
    }
    let refused = |b: &Value| error_for(b, &json!(21));
    assert!(!up.bodies().iter().any(refused), "{:?}", up.bodies());

    // The client had e2: the replay is a reused id.
    let again = resume(&up, gateway.addr, &sid, "e2", replay()).await;
    assert_eq!(data(&again), Vec::<Value>::new(), "{again:?}");
    let answer = up.wait_for("the -32600 for the replay", refused).await;
    assert_eq!(answer["error"]["code"], -32600);

    // Another text under the id, replayed after e1: a reused id too.
    up.received.lock().unwrap().clear();
    let other = vec![format!("id: e2\ndata: {}\n\n", sampling("21", 40)).into_bytes()];
    let again = resume(&up, gateway.addr, &sid, "e1", other).await;
    assert_eq!(data(&again), Vec::<Value>::new(), "{again:?}");
    up.wait_for("the -32600 for the other text", refused).await;

    // An event id the gateway never wrote places nothing: a reused id.
    up.received.lock().unwrap().clear();
    let again = resume(&up, gateway.addr, &sid, "e0", replay()).await;
    assert_eq!(data(&again), Vec::<Value>::new(), "{again:?}");
    up.wait_for("the -32600 for an unknown resumption", refused)
        .await;

    // The client answers once: settled, and the id is free again.
    let answer = send(
        gateway.addr,
        "POST",
        "/h/mcp",
        &[
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        r#"{"jsonrpc":"2.0","id":21,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"ok"}}}"#,
    )
    .await;
    assert!(answer.status.is_success(), "{:?}", answer.status);
    up.wait_for("the client's result", |b| {
        b["id"] == 21 && b.get("result").is_some()
    })
    .await;
}

/// MCP 2026-07-28 over HTTP: an `input_required` result on a POST's
/// stream has its sampling entry decided (trimmed) and its `requestState`
/// replaced by the gateway's own; the client's retry goes upstream with
/// the server's state restored; a retry past the entry's deadline is
/// answered by the gateway itself, as the POST's own JSON response, and
/// never reaches the server (`docs/spec/transports.md`, `to_client`
/// "during a POST").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_required_round_is_decided_and_a_late_retry_answered_by_the_gateway() {
    let (up, gateway) = stateful(Limits::default()).await;
    let ask = |state: &str| {
        let result = json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "input_required",
            "inputRequests": {"s": serde_json::from_str::<Value>(&sampling("1", 50)).unwrap()},
            "requestState": state}});
        vec![format!("id: r-{state}\ndata: {result}\n\n").into_bytes()]
    };
    let retry = |id: u64, token: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "t", "arguments": {}, "requestState": token,
            "inputResponses": {"s": {"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "ok"}}}}})
        .to_string()
    };
    let post = |sid: String, route: &'static str, body: String| async move {
        send(
            gateway.addr,
            "POST",
            &format!("/{route}/mcp"),
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", "2025-06-18"),
            ],
            &body,
        )
        .await
    };

    for (route, late) in [("h", false), ("slow", true)] {
        let sid = initialize(gateway.addr, route).await;
        let state = format!("server-state-{route}");
        let shown = data(&call(&up, gateway.addr, route, &sid, ask(&state)).await);
        assert_eq!(shown.len(), 1, "{shown:?}");
        let entry = &shown[0]["result"]["inputRequests"]["s"];
        assert_eq!(entry["params"]["maxTokens"], 20, "trimmed: {entry}");
        let token = shown[0]["result"]["requestState"].as_str().unwrap();
        assert_ne!(token, state, "the gateway's own token");
        if late {
            // `slow`: deadline 300ms.
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        }
        let done = json!({"jsonrpc": "2.0", "id": 8, "result": {"content": []}});
        *up.script.lock().unwrap() = vec![format!("data: {done}\n\n").into_bytes()];
        let answer = post(sid.clone(), route, retry(8, token)).await;
        assert_eq!(answer.status, StatusCode::OK, "{route}");
        if late {
            assert_eq!(
                answer.headers.get("content-type").unwrap(),
                "application/json"
            );
            let refusal: Value = serde_json::from_slice(&answer.body).unwrap();
            assert_eq!(refusal["id"], 8, "{refusal}");
            assert_eq!(
                refusal["error"]["data"]["reason"], "policy.deadline",
                "{refusal}"
            );
            assert!(
                !up.bodies()
                    .iter()
                    .any(|b| b["method"] == "tools/call" && b["params"]["requestState"] == state),
                "the late retry reached the server: {:?}",
                up.bodies()
            );
        } else {
            let sent = up
                .wait_for("the retry", |b| {
                    b["method"] == "tools/call" && b["params"]["requestState"] == state
                })
                .await;
            assert_eq!(sent["id"], 8);
            assert_eq!(
                sent["params"]["inputResponses"]["s"]["_meta"]["maxTokens"]["requested"], 50,
                "annotated: {sent}"
            );
            assert_eq!(data(&events(&answer.body)), [done]);
        }
    }
}
