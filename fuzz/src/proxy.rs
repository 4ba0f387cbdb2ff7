//! The proxy's line handling: `mcpc proxy`'s `Session` with in-memory sinks,
//! fed a script of server and client lines. Structure-aware: most lines are
//! JSON-RPC templates (sampling requests, answers, cancellations, MCP
//! 2026-07-28 `input_required` results and retries, the 2026-07-28 tasks
//! extension's `tasks/get`, `tasks/update`, `notifications/tasks` and task
//! creations) with fuzzer-chosen ids and mutations; the rest are raw bytes.
//! The server shares every key it may choose: ids, `requestState`s (also
//! tokens the proxy gave another call), `inputRequests` keys and task ids
//! come from small pools.
//!
//! Thin on purpose: it drives only `Session::new`, `from_server` (and
//! `from_server_again`), `from_client` and `expire`, so it follows the
//! session's refactoring.

use mcpolicy_proxy::capture::Captured as Buf;
use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use mcpolicy_proxy::log::{Audit, Log};
use mcpolicy_proxy::session::Session;
use mcpolicy_runtime::clock::ManualClock;
use mcpolicy_runtime::jsonrpc;
use mcpolicy_runtime::store::MemoryStore;
use mcpolicy_runtime::{Engine, Policy};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::bytes::Bytes;

/// The policy every session runs: one server per behaviour, shared with
/// the proxy's session tests.
const POLICY: &str = include_str!("../../proxy/tests/fixtures/session.mcpolicy");

const SERVERS: &[&str] = &["off", "asks", "first", "slow", "tight", "unknown"];

/// The fuzz policy, compiled and verified once (an `Engine` per input is
/// cheap: it shares this).
pub(crate) fn policy() -> Policy {
    static POLICY_ONCE: OnceLock<Policy> = OnceLock::new();
    POLICY_ONCE
        .get_or_init(|| {
            let parsed = mcpolicy_compiler::parse::parse(POLICY);
            let analysis = mcpolicy_compiler::db::analyze_parsed(&parsed);
            assert!(
                analysis.diagnostics.is_empty(),
                "the fuzz policy has findings: {:?}",
                analysis.diagnostics
            );
            Policy::verify(mcpolicy_compiler::lower::lower(&analysis.model))
                .unwrap_or_else(|e| panic!("the fuzz policy does not verify: {e}"))
        })
        .clone()
}

/// Ids the script picks from: reuse is the point.
fn id(bytes: &mut Bytes<'_>) -> Value {
    match bytes.below(8) {
        0 => json!(1),
        1 => json!(2),
        2 => json!("a"),
        3 => json!(1.0),
        4 => json!(-0),
        5 => json!("1"),
        6 => Value::Null,
        _ => json!(u64::from(bytes.byte())),
    }
}

/// Values a mutation writes in place of another.
fn palette(bytes: &mut Bytes<'_>) -> Value {
    match bytes.below(20) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(0),
        3 => json!(-1),
        4 => json!(1e300),
        5 => json!(u64::MAX),
        6 => json!(""),
        7 => json!("sampling/createMessage"),
        8 => json!("input_required"),
        9 => json!("e\u{301}"),
        10 => json!([]),
        11 => json!({}),
        12 => json!("allServers"),
        13 => json!("thisServer"),
        14 => json!({"type": "text", "text": "x"}),
        15 => json!({"inputTokens": 5, "outputTokens": 7}),
        16 => json!({"taskId": "t1", "status": "working"}),
        17 => json!(-32603),
        18 => {
            let mut deep = json!(0);
            for _ in 0..bytes.below(140) {
                deep = json!([deep]);
            }
            deep
        }
        _ => Value::from(String::from_utf8_lossy(bytes.chunk()).into_owned()),
    }
}

/// Replaces, removes or adds one member somewhere in `value`.
fn mutate(value: &mut Value, bytes: &mut Bytes<'_>) {
    let depth = bytes.below(5);
    mutate_at(value, depth, bytes);
}

fn mutate_at(node: &mut Value, depth: usize, bytes: &mut Bytes<'_>) {
    if depth > 0 {
        let child = match node {
            Value::Object(map) if !map.is_empty() => {
                let at = bytes.below(map.len());
                map.values_mut().nth(at)
            }
            Value::Array(list) if !list.is_empty() => {
                let at = bytes.below(list.len());
                list.get_mut(at)
            }
            _ => None,
        };
        if let Some(child) = child {
            return mutate_at(child, depth - 1, bytes);
        }
    }
    match (bytes.below(4), node) {
        (0, Value::Object(map)) if !map.is_empty() => {
            let at = bytes.below(map.len());
            if let Some(key) = map.keys().nth(at).cloned() {
                map.remove(&key);
            }
        }
        (1, Value::Object(map)) => {
            let key = *bytes.pick(&[
                "method",
                "id",
                "result",
                "error",
                "params",
                "task",
                "includeContext",
                "maxTokens",
                "resultType",
                "requestState",
                "inputRequests",
                "inputResponses",
                "usage",
                "model",
                "tools",
                "_meta",
            ]);
            map.insert(key.to_owned(), palette(bytes));
        }
        (_, node) => *node = palette(bytes),
    }
}

fn sampling_params(bytes: &mut Bytes<'_>) -> Value {
    let mut params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        "maxTokens": 100,
    });
    if bytes.below(2) == 0 {
        params["systemPrompt"] = json!("be brief");
        params["includeContext"] = palette(bytes);
    }
    if bytes.below(4) == 0 {
        params["task"] = json!({"ttl": 60000});
    }
    if bytes.below(4) == 0 {
        params["modelPreferences"] = json!({"hints": [{"name": "claude-3"}, {"name": "gpt-9"}]});
    }
    if bytes.below(4) == 0 {
        params["tools"] = json!([{"name": "t", "inputSchema": {"type": "object"}}]);
    }
    params
}

/// One template line for the server (`true`) or the client side.
fn template(bytes: &mut Bytes<'_>, states: &[String]) -> (bool, Value) {
    let id = id(bytes);
    let task = *bytes.pick(&["t1", "t2"]);
    match bytes.below(15) {
        10 => (
            false,
            json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task}}),
        ),
        11 | 12 => {
            let mut requests = serde_json::Map::new();
            for i in 0..=bytes.below(2) {
                requests.insert(
                    format!("k{i}"),
                    json!({"method": "sampling/createMessage", "params": sampling_params(bytes)}),
                );
            }
            let status = *bytes.pick(&["input_required", "working", "completed"]);
            let body = json!({"taskId": task, "status": status, "ttlMs": 60000,
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
                "inputRequests": requests});
            if bytes.below(2) == 0 {
                let mut result = body;
                result["resultType"] = json!("complete");
                (true, json!({"jsonrpc": "2.0", "id": id, "result": result}))
            } else {
                (
                    true,
                    json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": body}),
                )
            }
        }
        13 => (
            true,
            json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "task", "taskId": task,
                "status": "working", "ttlMs": 60000}}),
        ),
        14 => {
            let mut responses = serde_json::Map::new();
            for i in 0..bytes.below(3) {
                responses.insert(
                    format!("k{i}"),
                    json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}),
                );
            }
            (
                false,
                json!({"jsonrpc": "2.0", "id": id, "method": "tasks/update", "params": {"taskId": task, "inputResponses": responses}}),
            )
        }
        0 | 1 => (
            true,
            json!({"jsonrpc": "2.0", "id": id, "method": "sampling/createMessage", "params": sampling_params(bytes)}),
        ),
        2 => {
            let usage = palette(bytes);
            (
                false,
                json!({"jsonrpc": "2.0", "id": id, "result": {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "claude-3", "usage": usage}}),
            )
        }
        3 => {
            let code = *bytes.pick(&[-1, -32603, -32600, -32602, 0, -32010]);
            (
                false,
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "no"}}),
            )
        }
        4 => (
            true,
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "gone"}}),
        ),
        5 => {
            let state = *bytes.pick(&["s1", "s2", ""]);
            let mut requests = serde_json::Map::new();
            for i in 0..=bytes.below(3) {
                requests.insert(
                    format!("k{i}"),
                    json!({"method": "sampling/createMessage", "params": sampling_params(bytes)}),
                );
            }
            (
                true,
                json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "input_required", "requestState": state, "inputRequests": requests}}),
            )
        }
        6 => {
            // The server's own states, or a token the proxy gave a call.
            let state = match bytes.below(4) {
                0 if !states.is_empty() => bytes.pick(states).clone(),
                _ => (*bytes.pick(&["s1", "s2", ""])).to_owned(),
            };
            let mut responses = serde_json::Map::new();
            for i in 0..bytes.below(3) {
                responses.insert(
                    format!("k{i}"),
                    json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m", "usage": {"totalTokens": 9}}),
                );
            }
            (
                false,
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "x", "requestState": state, "inputResponses": responses}}),
            )
        }
        7 => (
            false,
            json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"capabilities": {"sampling": {"context": {}}}}}),
        ),
        8 => (
            true,
            json!({"jsonrpc": "2.0", "id": id, "result": {"task": {"taskId": "t1", "status": "working"}}}),
        ),
        _ => (
            false,
            json!({"jsonrpc": "2.0", "id": id, "result": {"task": {"taskId": "t1", "status": *bytes.pick(&["completed", "failed", "cancelled"])}}}),
        ),
    }
}

/// A template, mutated, serialised, sometimes with a textual twist serde
/// cannot produce (a duplicate member, an escaped method name).
fn line(bytes: &mut Bytes<'_>, states: &[String]) -> (bool, Vec<u8>) {
    let (to_server, mut value) = template(bytes, states);
    for _ in 0..bytes.below(4) {
        mutate(&mut value, bytes);
    }
    let mut text = value.to_string();
    match bytes.below(8) {
        0 => text = text.replacen('{', r#"{"method":"sampling/createMessage","#, 1),
        1 => text = text.replace("sampling/createMessage", r"sampling\/createMessage"),
        2 => text = text.replacen('{', r#"{"id":2,"#, 1),
        3 => text.push('\r'),
        _ => {}
    }
    (to_server, text.into_bytes())
}

/// Whether a line the client receives asks it to sample (as a JSON reader
/// that keeps the last of duplicate members sees it).
fn asks_to_sample(line: &[u8], polls: &mut HashSet<String>) -> bool {
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    let mut one = |v: &Value| {
        if v.get("method").and_then(Value::as_str) == Some(jsonrpc::SAMPLING_METHOD) {
            return true;
        }
        // A result the client can route: JSON-RPC clients match results
        // to their calls by a string or number id. (A result with a null or
        // no id passes the proxy undecided; no client acts on it.)
        let routable = matches!(v.get("id"), Some(Value::String(_) | Value::Number(_)));
        let result = v.get("result").filter(|_| routable);
        let input_required = result
            .and_then(|r| r.get("resultType"))
            .and_then(Value::as_str)
            == Some("input_required");
        if input_required && result.is_some_and(asks_for_sampling_input) {
            return true;
        }
        // A task of the 2026-07-28 tasks extension waiting for input, as a
        // `tasks/get` answer or a `notifications/tasks` (a terminal task's
        // input requests are not read).
        // A result answers a `tasks/get` the client has pending (the
        // first answer to its id; the client drops any later one).
        let polled = result.filter(|_| v.get("id").is_some_and(|id| polls.remove(&id_text(id))));
        let task = polled.or_else(|| {
            (v.get("method").and_then(Value::as_str) == Some("notifications/tasks"))
                .then(|| v.get("params"))
                .flatten()
        });
        task.is_some_and(|t| {
            let terminal = matches!(
                t.get("status").and_then(Value::as_str),
                Some("completed" | "failed" | "cancelled")
            );
            !terminal && t.get("inputRequests").is_some_and(asks_for_sampling_input)
        })
    };
    match &value {
        Value::Array(items) => {
            // Every item is read (a client answers each of a batch).
            let mut any = false;
            for item in items {
                any |= one(item);
            }
            any
        }
        other => one(other),
    }
}

/// An id as a client compares it (a number by value, a string as text).
fn id_text(id: &Value) -> String {
    match id {
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), |f| f.to_string()),
        other => other.to_string(),
    }
}

/// The id of a client `tasks/get` line, if it is one.
fn poll_id(line: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("method")?.as_str()? != "tasks/get" {
        return None;
    }
    Some(id_text(value.get("id")?))
}

/// Whether an MCP 2026-07-28 `InputRequiredResult` has a sampling entry
/// in its `inputRequests` (a map by key, or a list), read here on its own
/// as the client would read it: the oracle does not reuse the runtime's
/// reading of the frame.
fn asks_for_sampling_input(result: &Value) -> bool {
    let is_sampling = |entry: &Value| {
        entry.get("method").and_then(Value::as_str) == Some(jsonrpc::SAMPLING_METHOD)
    };
    match result.get("inputRequests").unwrap_or(result) {
        Value::Object(entries) => entries.values().any(is_sampling),
        Value::Array(entries) => entries.iter().any(is_sampling),
        _ => false,
    }
}

/// `proxy`: no panic; every line to the client is JSON; every line to the
/// server is JSON or a client line passed on unchanged; every audit line is
/// JSON and every log write is one line; under `sampling off` the client is
/// never asked to sample.
pub fn run(data: &[u8]) {
    let mut bytes = Bytes::new(data);
    let server_id = *bytes.pick(SERVERS);
    let clock = Arc::new(ManualClock::new(1_773_144_000_000));
    let engine = Engine::new(policy(), Arc::new(MemoryStore::new()), clock.clone());
    let (server, client, audit, log) = (
        Buf::default(),
        Buf::default(),
        Buf::default(),
        Buf::default(),
    );
    let session = Session::new(
        engine,
        server_id,
        Box::new(server.clone()),
        Box::new(client.clone()),
        Log::to(Box::new(log.clone()), server_id),
        Some(Audit::to(Box::new(audit.clone()))),
    )
    // As the gateway's: lines sent again are known (`from_server_again`).
    .resumable();
    let mut from_client: HashSet<Vec<u8>> = HashSet::new();
    // `requestState`s the proxy gave the client: retries reuse them on any call.
    let mut states: Vec<String> = Vec::new();
    // Ids of the client's `tasks/get` calls not answered yet.
    let mut polls: HashSet<String> = HashSet::new();
    let start = Instant::now();
    for _ in 0..64 {
        if bytes.is_empty() {
            break;
        }
        match bytes.below(8) {
            0..=3 => {
                let (to_server_side, text) = line(&mut bytes, &states);
                if to_server_side {
                    // Sometimes as a message sent again on a resumed stream.
                    if bytes.below(4) == 0 {
                        session.from_server_again(&text);
                    } else {
                        session.from_server(&text);
                    }
                } else {
                    from_client.insert(trim(&text).to_vec());
                    polls.extend(poll_id(trim(&text)));
                    session.from_client(&text);
                }
            }
            op @ (4 | 5) => {
                // Raw bytes, cut into lines as the proxy's readers cut them.
                for raw in bytes.chunk().split(|&b| b == b'\n') {
                    let mut raw = raw.to_vec();
                    raw.push(b'\n');
                    if op == 4 {
                        session.from_server(&raw);
                    } else {
                        from_client.insert(trim(&raw).to_vec());
                        polls.extend(poll_id(trim(&raw)));
                        session.from_client(&raw);
                    }
                }
            }
            6 => {
                let step = i64::from(bytes.byte() as i8) * 60_000;
                clock.advance(step);
            }
            _ => {
                let later = Duration::from_millis(u64::from(bytes.byte()));
                session.expire(start + later);
            }
        }
        states.extend(check_outputs(
            server_id,
            &server,
            &client,
            &audit,
            &log,
            &from_client,
            &mut polls,
        ));
    }
    session.expire(start + Duration::from_secs(3600));
    check_outputs(
        server_id,
        &server,
        &client,
        &audit,
        &log,
        &from_client,
        &mut polls,
    );
}

fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_json(line: &[u8]) -> bool {
    serde_json::from_slice::<IgnoredAny>(line).is_ok()
}

fn check_outputs(
    server_id: &str,
    server: &Buf,
    client: &Buf,
    audit: &Buf,
    log: &Buf,
    from_client: &HashSet<Vec<u8>>,
    polls: &mut HashSet<String>,
) -> Vec<String> {
    let mut states = Vec::new();
    for line in client.take_lines() {
        let shown = String::from_utf8_lossy(&line);
        assert!(is_json(&line), "to the client, not JSON: {shown}");
        if let Ok(value) = serde_json::from_slice::<Value>(&line)
            && let Some(state) = value
                .pointer("/result/requestState")
                .and_then(Value::as_str)
        {
            states.push(state.to_owned());
        }
        if server_id == "off" {
            assert!(
                !asks_to_sample(&line, polls),
                "under `sampling off` the client was asked to sample: {shown}"
            );
        }
    }
    for line in server.take_lines() {
        let line = trim(&line);
        assert!(
            is_json(line) || from_client.contains(line),
            "to the server, neither JSON nor a client line: {}",
            String::from_utf8_lossy(line)
        );
    }
    for line in audit.take_lines() {
        assert!(
            is_json(&line),
            "audit line not JSON: {}",
            String::from_utf8_lossy(&line)
        );
    }
    for line in log.take_lines() {
        let text = String::from_utf8_lossy(&line);
        assert!(
            text.split_once(' ')
                .is_some_and(|(_, rest)| rest.starts_with("mcpc proxy [")),
            "a log line the proxy did not start (a forged line?): {text}"
        );
    }
    states
}
