//! A session's life over HTTP (`docs/spec/transports.md`): a deadline the
//! client misses is answered to the server in a POST of its own and the
//! client told to stop on the stream the request arrived on; an idle
//! session ends; streams past the cap are refused; credentials, the
//! upstream's 401 and OAuth discovery pass through.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use mcpolicy_gateway::Limits;
use serde_json::Value;
use support::{Upstream, events, initialize, send, setup, stateful};

const CALL: &str =
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}"#;

fn sampling(id: u32) -> String {
    format!(
        r#"data: {{"jsonrpc":"2.0","id":{id},"method":"sampling/createMessage","params":{{"messages":[{{"role":"user","content":{{"type":"text","text":"hi"}}}}],"maxTokens":10}}}}"#
    ) + "\n\n"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_deadline_answers_the_server_and_cancels_on_the_requests_stream() {
    let (up, gateway) = setup(
        Upstream {
            stateful: true,
            hold: Duration::from_millis(1500),
            ..Upstream::default()
        },
        Limits::default(),
    )
    .await;
    let sid = initialize(gateway.addr, "slow").await;
    *up.script.lock().unwrap() = vec![sampling(31).into_bytes()];
    let answer = send(
        gateway.addr,
        "POST",
        "/slow/mcp",
        &[("mcp-session-id", &sid), ("authorization", "Bearer good")],
        CALL,
    )
    .await;
    // The request, then (300 ms later, the client never answering) the
    // cancellation, on the same stream.
    let shown: Vec<Value> = events(&answer.body)
        .iter()
        .filter_map(|e| e.data.as_deref())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}\n{}", gateway.log.text());
    assert_eq!(shown[0]["id"], 31);
    assert_eq!(shown[1]["method"], "notifications/cancelled");
    assert_eq!(shown[1]["params"]["requestId"], 31);
    let denial = up
        .wait_for("the deadline denial", |b| {
            b["id"] == 31 && b.get("error").is_some()
        })
        .await;
    assert_eq!(
        denial["error"]["data"]["reason"], "policy.deadline",
        "{denial}"
    );
    // Sent with the session's id and the client's credentials.
    let received = up.received.lock().unwrap().clone();
    let (_, headers, _) = received
        .iter()
        .find(|(_, _, body)| body.windows(7).any(|w| w == b"\"id\":31"))
        .unwrap();
    assert!(headers.contains(&("mcp-session-id".into(), "s1".into())));
    assert!(headers.contains(&("authorization".into(), "Bearer good".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ends_and_a_new_message_starts_one_again() {
    let (_up, gateway) = stateful(Limits {
        idle_timeout: Duration::from_millis(200),
        ..Limits::default()
    })
    .await;
    let sid = initialize(gateway.addr, "h").await;
    for _ in 0..200 {
        if gateway.log.text().contains("ended: idle timeout") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        gateway.log.text().contains("ended: idle timeout"),
        "{}",
        gateway.log.text()
    );
    // The id is still the server's: the next message decides again.
    let answer = send(
        gateway.addr,
        "POST",
        "/h/mcp",
        &[("mcp-session-id", &sid)],
        r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(gateway.log.text().contains("deciding from here on"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_cap_are_refused_503() {
    let (up, gateway) = setup(
        Upstream {
            stateful: true,
            hold: Duration::from_millis(800),
            ..Upstream::default()
        },
        Limits {
            max_streams: 1,
            ..Limits::default()
        },
    )
    .await;
    let addr = gateway.addr;
    // `initialize` is a request: it takes the one stream while it runs.
    let sid = initialize(addr, "h").await;
    *up.script.lock().unwrap() = vec![b": open\n\n".to_vec()];
    let first = tokio::spawn({
        let sid = sid.clone();
        async move { send(addr, "POST", "/h/mcp", &[("mcp-session-id", &sid)], CALL).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send(addr, "POST", "/h/mcp", &[("mcp-session-id", &sid)], CALL).await;
    assert_eq!(second.status, StatusCode::SERVICE_UNAVAILABLE);
    let error: Value = serde_json::from_slice(&second.body).unwrap();
    assert_eq!(error["id"], 7, "{error}");
    assert_eq!(first.await.unwrap().status, StatusCode::OK);
    // Notifications open no stream: never refused for the cap.
    let note = send(
        addr,
        "POST",
        "/h/mcp",
        &[("mcp-session-id", &sid)],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(note.status, StatusCode::ACCEPTED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_a_401_and_oauth_discovery_pass_through() {
    let (up, gateway) = stateful(Limits::default()).await;
    let addr = gateway.addr;
    let answer = send(
        addr,
        "POST",
        "/h/mcp",
        &[
            ("authorization", "Bearer bad"),
            ("connection", "x-hop"),
            ("x-hop", "1"),
            ("x-kept", "2"),
        ],
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#,
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(
        answer
            .headers
            .get("www-authenticate")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("Bearer resource_metadata=")
    );
    let received = up.received.lock().unwrap().clone();
    let (_, headers, _) = &received[0];
    assert!(headers.contains(&("authorization".into(), "Bearer bad".into())));
    assert!(headers.contains(&("x-kept".into(), "2".into())));
    assert!(headers.iter().all(|(name, _)| name != "x-hop"));
    assert!(
        !gateway.log.text().contains("Bearer"),
        "{}",
        gateway.log.text()
    );

    for (path, upstream_path) in [
        (
            "/.well-known/oauth-protected-resource/h/mcp",
            "/.well-known/oauth-protected-resource/mcp",
        ),
        (
            "/.well-known/oauth-authorization-server/h",
            "/.well-known/oauth-authorization-server",
        ),
        (
            "/.well-known/openid-configuration/h/tenant",
            "/.well-known/openid-configuration/tenant",
        ),
    ] {
        let answer = send(addr, "GET", path, &[], "").await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        let body: Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(body["served"], upstream_path, "{path}");
    }
    let answer = send(
        addr,
        "GET",
        "/.well-known/oauth-protected-resource/nope/mcp",
        &[],
        "",
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_isolated_an_id_in_flight_in_one_is_free_in_another() {
    let (up, gateway) = stateful(Limits::default()).await;
    let first = initialize(gateway.addr, "h").await;
    let second = initialize(gateway.addr, "h").await;
    assert_eq!((first.as_str(), second.as_str()), ("s1", "s2"));
    let shown = |sid: String| {
        let up = Arc::clone(&up);
        let addr = gateway.addr;
        async move {
            *up.script.lock().unwrap() = vec![sampling(5).into_bytes()];
            let answer = send(addr, "POST", "/h/mcp", &[("mcp-session-id", &sid)], CALL).await;
            events(&answer.body)
                .iter()
                .filter_map(|e| e.data.clone())
                .collect::<Vec<_>>()
        }
    };
    // Id 5 is in flight in s1 (the client never answers): s2 still gets its
    // own request 5, and s1 refuses a second 5 to the server.
    assert_eq!(shown(first.clone()).await.len(), 1);
    assert_eq!(shown(second).await.len(), 1);
    assert_eq!(shown(first).await.len(), 0);
    let refusal = up
        .wait_for("the refusal of the reused id", |b| {
            b["id"] == 5 && b["error"]["code"] == -32600
        })
        .await;
    assert!(refusal["error"]["message"].is_string());
    let received = up.received.lock().unwrap().clone();
    let refused_on: Vec<&String> = received
        .iter()
        .filter(|(_, _, body)| body.windows(9).any(|w| w == b"\"id\":5,\"e"))
        .flat_map(|(_, headers, _)| {
            headers
                .iter()
                .filter(|(n, _)| n == "mcp-session-id")
                .map(|(_, v)| v)
        })
        .collect();
    assert_eq!(refused_on, ["s1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_waiting_for_a_slow_answer_is_not_idle() {
    let (_up, gateway) = stateful(Limits {
        idle_timeout: Duration::from_millis(150),
        ..Limits::default()
    })
    .await;
    let sid = initialize(gateway.addr, "h").await;
    let slow = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"slowjson"}}"#;
    let answer = send(
        gateway.addr,
        "POST",
        "/h/mcp",
        &[("mcp-session-id", &sid)],
        slow,
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    // 600 ms with no message, but a request in progress: still alive.
    assert!(
        !gateway.log.text().contains("idle timeout"),
        "{}",
        gateway.log.text()
    );
}
