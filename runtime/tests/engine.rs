//! Evaluation, end to end through the engine: every outcome and reason,
//! replays, windows, settlement, invalidation. See `runtime/ENGINE.md`.

mod engine_support;

use std::sync::Arc;

use engine_support::*;
use mcpolicy_runtime::clock::Clock;
use mcpolicy_runtime::clock::timestamp;
use mcpolicy_runtime::engine::{Decision, Denial, Expiry, Grant, PendingConsent};
use mcpolicy_runtime::store::{DecisionKey, DecisionStore, MemoryStore, Verdict};
use mcpolicy_runtime::table::{
    BudgetMetric, CalendarUnit, Consent, ContextScope, ProtocolRevision, Ttl, Window, builtin,
};
use serde_json::{Value, json};

fn denial(decision: Decision) -> Denial {
    match decision {
        Decision::Deny(denial) => denial,
        other => panic!("expected a denial, got {other:?}"),
    }
}

fn allowed(decision: Decision) -> Grant {
    match decision {
        Decision::Allow(grant) => grant,
        other => panic!("expected an allow, got {other:?}"),
    }
}

fn trimmed(decision: Decision) -> Grant {
    match decision {
        Decision::Trim(grant) => grant,
        other => panic!("expected a trim, got {other:?}"),
    }
}

fn pending(decision: Decision) -> PendingConsent {
    match decision {
        Decision::NeedsConsent(pending) => pending,
        other => panic!("expected a consent question, got {other:?}"),
    }
}

/// The client of the seed's test: it counts consent prompts and provider calls.
struct Client {
    h: Harness,
    consent_prompts_shown: u32,
    provider_calls: u32,
    user_approves: bool,
}

impl Client {
    /// Runs one request the way an embedding client does; returns the frame
    /// (for a denial) or the result (for a completion).
    fn sample(
        &mut self,
        server: &str,
        request: &mcpolicy_runtime::request::SamplingRequest,
    ) -> Value {
        let mut decision = self.h.decide(server, request);
        if let Decision::NeedsConsent(p) = decision {
            self.consent_prompts_shown += 1;
            decision = resolve(p, self.user_approves);
        }
        match decision {
            Decision::Deny(d) => parse(&d.reply(request.id.as_ref())),
            Decision::Allow(g) | Decision::Trim(g) => {
                self.provider_calls += 1;
                let mut result = json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"});
                g.annotate(&mut result);
                g.complete(10).expect("settle");
                json!({"jsonrpc": "2.0", "id": request.id, "result": result})
            }
            Decision::NeedsConsent(_) => unreachable!(),
        }
    }
}

fn seed_request(text: &str) -> mcpolicy_runtime::request::SamplingRequest {
    params(json!({
        "systemPrompt": "P",
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "includeContext": "allServers",
        "maxTokens": 500,
    }))
}

fn retry_cannot_bypass_denial(store: Arc<dyn DecisionStore>) {
    // One request per day, consent asked once per identity.
    let mut block = open_block();
    block.consent = Consent::First;
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        1,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::with_store(table(vec![("release-notes", block)]), store);
    let mut client = Client {
        h,
        consent_prompts_shown: 0,
        provider_calls: 0,
        user_approves: true,
    };
    // Earlier traffic of the day spends the budget (and is the one consent prompt).
    let earlier = client.sample("release-notes", &seed_request("earlier"));
    assert!(earlier.get("result").is_some());
    let provider_before = client.provider_calls;

    // The adversary's request and its identical retry under a new envelope.
    let first = client.sample("release-notes", &seed_request("M"));
    assert_eq!(first["error"]["data"]["reason"], "policy.budget_exhausted");
    let mut retry = seed_request("M");
    retry.id = Some(json!(48));
    let second = client.sample("release-notes", &retry);
    assert_eq!(second["error"]["data"], first["error"]["data"]);
    assert_eq!(second["error"]["message"], first["error"]["message"]);
    assert_eq!(second["id"], 48);
    assert_eq!(client.consent_prompts_shown, 1, "the user was asked once");
    assert_eq!(
        client.provider_calls, provider_before,
        "nothing was spent on either"
    );
    let identity = mcpolicy_runtime::identity::request_identity(
        "release-notes",
        seed_request("M").params(),
        &client.h.engine.policy().table().identity,
    );
    let stored = client
        .h
        .store
        .get(&DecisionKey::new("release-notes", identity.as_str()))
        .expect("get")
        .expect("stored");
    assert_eq!(stored.represented, 1);
    assert_eq!(
        first["error"]["data"],
        json!({"reason": "policy.budget_exhausted", "server": "release-notes", "retryable": false, "resetsAt": "2026-03-11T00:00:00Z"})
    );
}

#[test]
fn test_retry_cannot_bypass_denial() {
    retry_cannot_bypass_denial(Arc::new(MemoryStore::new()));
}

#[cfg(feature = "sqlite")]
#[test]
fn test_retry_cannot_bypass_denial_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mcpolicy_runtime::store::SqliteStore::open(dir.path().join("decisions.db"))
        .expect("open store");
    retry_cannot_bypass_denial(Arc::new(store));
}

#[test]
fn refused_consent_is_asked_once_and_replayed_byte_identically() {
    let mut block = open_block();
    block.consent = Consent::First;
    let h = Harness::new(table(vec![("s", block)]));
    let mut client = Client {
        h,
        consent_prompts_shown: 0,
        provider_calls: 0,
        user_approves: false,
    };
    let request = seed_request("M");
    let first = client.sample("s", &request);
    let second = client.sample("s", &request);
    assert_eq!(
        first["error"]["code"], -1,
        "MCP asks for -1 on a user refusal"
    );
    assert_eq!(first["error"]["data"]["reason"], "user.denied");
    assert_eq!(first, second);
    assert_eq!(client.consent_prompts_shown, 1);
    assert_eq!(client.provider_calls, 0);
}

#[test]
fn replayed_frame_is_byte_identical() {
    let mut block = open_block();
    block.max_input = limit(10);
    let h = Harness::new(table(vec![("s", block)]));
    let request = simple("far more than ten bytes");
    let first = denial(h.decide("s", &request));
    h.clock.advance(5_000);
    let second = denial(h.decide("s", &request));
    assert!(!first.replayed() && second.replayed());
    assert_eq!(data_text(&first), data_text(&second));
    assert_eq!(first.reply(Some(&json!(1))), second.reply(Some(&json!(1))));
    assert_eq!(
        first.message(),
        "Sampling denied: the request from server 's' exceeds 10 B"
    );
    assert_eq!(second.represented(), 1);
    assert_eq!(denial(h.decide("s", &request)).represented(), 2);
}

#[test]
fn allow_carries_deadline_and_ticket() {
    let mut block = open_block();
    block.deadline = deadline(60_000);
    let h = Harness::new(table(vec![("s", block)]));
    let grant = allowed(h.decide("s", &simple("hi")));
    assert_eq!(grant.deadline_ms(), Some(60_000));
    assert!(grant.annotations().is_empty() && grant.lowered().is_empty());
    assert_eq!(grant.server_id(), "s");
    assert!(grant.identity().starts_with("s:"));
    assert_eq!(grant.identity().len(), 2 + 32);
    // Nothing counted, nothing stored.
    assert!(grant.reservation().is_none());
    let key = DecisionKey::new("s", grant.identity());
    assert_eq!(h.store.get(&key).expect("get"), None);
}

#[test]
fn sampling_off_denies_forever_until_the_block_changes() {
    let mut off = open_block();
    off.sampling.enabled = false;
    let h = Harness::new(table(vec![("github-*", off.clone())]));
    let d = denial(h.decide("github-enterprise", &simple("x")));
    assert_eq!(d.reason(), builtin::SAMPLING_DISABLED);
    assert_eq!(d.code(), CODE_I32);
    assert!(!d.retryable());
    assert_eq!(d.expiry(), Expiry::UntilBlockChanges);
    assert_eq!(
        parse(&d.reply(Some(&json!("a")))),
        json!({"jsonrpc": "2.0", "id": "a", "error": {"code": CODE,
            "message": "Sampling denied: sampling is disabled for server 'github-enterprise'",
            "data": {"reason": "policy.sampling_disabled", "server": "github-enterprise", "retryable": false}}})
    );
    // A year later: still replayed.
    h.clock.advance(365 * 86_400_000);
    assert!(denial(h.decide("github-enterprise", &simple("x"))).replayed());
    // Other servers fall through to the open fallback.
    allowed(h.decide("gitlab", &simple("x")));
}

#[test]
fn tools_off_denies_requests_that_carry_tools() {
    with_each_store(tools_off_denies_requests_that_carry_tools_in);
}

fn tools_off_denies_requests_that_carry_tools_in(store: Arc<dyn DecisionStore>) {
    let mut block = open_block();
    block.tools.enabled = false;
    let h = Harness::with_store(table(vec![("s", block)]), store);
    let with_tools = params(json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "w"}}],
        "maxTokens": 10,
        "tools": [{"name": "get_weather", "inputSchema": {"type": "object"}}],
    }));
    assert_eq!(
        denial(h.decide("s", &with_tools)).reason(),
        builtin::TOOLS_DISABLED
    );
    let choice = params(json!({
        "messages": [], "maxTokens": 10, "toolChoice": {"mode": "auto"},
    }));
    assert_eq!(
        denial(h.decide("s", &choice)).reason(),
        builtin::TOOLS_DISABLED
    );
    let empty = params(json!({"messages": [], "maxTokens": 10, "tools": []}));
    allowed(h.decide("s", &empty));
}

#[test]
fn input_limits_deny() {
    with_each_store(input_limits_deny_in);
}

fn input_limits_deny_in(store: Arc<dyn DecisionStore>) {
    let mut block = open_block();
    block.max_messages = Some(mcpolicy_runtime::table::Limit {
        max: 2,
        reason: builtin::INPUT_TOO_LARGE.into(),
    });
    block.max_input = limit(64 * 1024);
    let h = Harness::with_store(table(vec![("s", block)]), store);
    let three = params(json!({"messages": [
        {"role": "user", "content": {"type": "text", "text": "1"}},
        {"role": "assistant", "content": {"type": "text", "text": "2"}},
        {"role": "user", "content": {"type": "text", "text": "3"}}], "maxTokens": 5}));
    let d = denial(h.decide("s", &three));
    assert_eq!(d.reason(), builtin::INPUT_TOO_LARGE);
    assert_eq!(
        d.message(),
        "Sampling denied: the request from server 's' exceeds 2 messages"
    );
    // Replayed with the same message.
    assert_eq!(denial(h.decide("s", &three)).message(), d.message());

    let big = "x".repeat(64 * 1024);
    let large = params(json!({"systemPrompt": big, "messages": [], "maxTokens": 5}));
    let d = denial(h.decide("s", &large));
    assert_eq!(
        d.message(),
        "Sampling denied: the request from server 's' exceeds 64 KiB"
    );
    assert_eq!(denial(h.decide("s", &large)).message(), d.message());
    // Exactly at the limit: canonical bytes of systemPrompt ("…" quoted) + messages ("[]").
    let fits =
        params(json!({"systemPrompt": "x".repeat(64 * 1024 - 4), "messages": [], "maxTokens": 5}));
    allowed(h.decide("s", &fits));
    let over =
        params(json!({"systemPrompt": "x".repeat(64 * 1024 - 3), "messages": [], "maxTokens": 5}));
    denial(h.decide("s", &over));
}

#[test]
fn trims_lower_the_request_and_annotate_the_result() {
    let mut block = open_block();
    block.max_context = ContextScope::ThisServer;
    block.max_tokens = Some(4096);
    block.models = Some(vec!["claude-*".into(), "gpt-4o".into()]);
    let h = Harness::new(table(vec![("s", block)]));
    let request = params(json!({
        "messages": [],
        "maxTokens": 9000,
        "includeContext": "allServers",
        "modelPreferences": {"hints": [{"name": "gpt-5"}, {"name": "claude-3-sonnet"}, {"name": "gpt-4o"}], "speedPriority": 0.5},
    }));
    let grant = trimmed(h.decide("s", &request));
    let lowered = grant.params(request.params());
    assert_eq!(lowered["includeContext"], "thisServer");
    assert_eq!(lowered["maxTokens"], 4096);
    assert_eq!(
        lowered["modelPreferences"],
        json!({"hints": [{"name": "claude-3-sonnet"}, {"name": "gpt-4o"}], "speedPriority": 0.5})
    );
    let mut result = json!({"role": "assistant", "content": {"type": "text", "text": "t"}, "model": "claude-3-sonnet", "_meta": {"trace": 1}});
    assert!(grant.annotate(&mut result));
    assert_eq!(
        result["_meta"],
        json!({
            "trace": 1,
            "context": {"requested": "allServers", "applied": "thisServer", "reason": "policy.max_scope"},
            "maxTokens": {"requested": 9000, "applied": 4096, "reason": "policy.max_tokens"},
            "model": {"requested": ["gpt-5", "claude-3-sonnet", "gpt-4o"], "applied": ["claude-3-sonnet", "gpt-4o"],
                      "allowed": ["claude-*", "gpt-4o"], "reason": "policy.model"},
        })
    );
    assert_eq!(
        grant.allowed_models().map(Iterator::collect::<Vec<_>>),
        Some(vec!["claude-*", "gpt-4o"])
    );
    assert!(grant.model_allowed("claude-3-opus"));
    assert!(!grant.model_allowed("gpt-5"));
    // Trims are never stored.
    let key = DecisionKey::new("s", grant.identity());
    assert_eq!(h.store.get(&key).expect("get"), None);

    // A request inside every limit is a plain allow.
    let modest = params(
        json!({"messages": [], "maxTokens": 10, "includeContext": "thisServer",
        "modelPreferences": {"hints": [{"name": "claude-x"}]}}),
    );
    allowed(h.decide("s", &modest));

    // Every hint outside the list: hints emptied, the client picks from `allowed`.
    let outside = params(
        json!({"messages": [], "maxTokens": 10, "modelPreferences": {"hints": [{"name": "o1"}]}}),
    );
    let grant = trimmed(h.decide("s", &outside));
    assert_eq!(
        grant.params(outside.params())["modelPreferences"]["hints"],
        json!([])
    );
}

#[test]
fn unknown_include_context_is_refused_not_widened() {
    // `docs/spec/evaluation.md`, "Step 1: Validation": an unknown scope is a schema violation (-32602) with
    // the request's id, never read as some scope and forwarded.
    let mut block = open_block();
    block.max_context = ContextScope::AllServers;
    let h = Harness::new(table(vec![("s", block)]));
    for scope in [json!("everything"), json!("ThisServer"), json!(7)] {
        let bytes = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": 47, "method": "sampling/createMessage",
            "params": {"messages": [], "maxTokens": 1, "includeContext": scope},
        }))
        .expect("serialise");
        match h.engine.decide("s", &bytes, &Default::default()) {
            mcpolicy_runtime::engine::Answer::Invalid(rejection) => {
                assert_eq!(rejection.code(), -32602, "{scope}");
                assert_eq!(parse(&rejection.reply())["id"], 47);
            }
            other => panic!("{scope}: {other:?}"),
        }
    }
}

#[test]
fn context_capability_rule_of_2026_07_28() {
    let mut block = open_block();
    block.max_context = ContextScope::AllServers;
    let t = table_with(
        ProtocolRevision::V2026_07_28,
        reasons(),
        vec![("s", block.clone())],
        open_block(),
    );
    let h = Harness::new(t);
    let request = params(json!({"messages": [], "maxTokens": 1, "includeContext": "thisServer"}));
    let without = mcpolicy_runtime::engine::ClientContext::with_sampling_context(false);
    let grant = match h
        .engine
        .decide_request("s", &request, &without)
        .expect("decide")
    {
        Decision::Trim(g) => g,
        other => panic!("{other:?}"),
    };
    assert_eq!(grant.params(request.params())["includeContext"], "none");
    let with = mcpolicy_runtime::engine::ClientContext::with_sampling_context(true);
    assert!(matches!(
        h.engine
            .decide_request("s", &request, &with)
            .expect("decide"),
        Decision::Allow(_)
    ));
    // Earlier revisions do not apply the rule.
    let old = Harness::new(table(vec![("s", block)]));
    assert!(matches!(
        old.engine
            .decide_request("s", &request, &without)
            .expect("decide"),
        Decision::Allow(_)
    ));
}

#[test]
fn rate_limit_denies_retryably_and_expires() {
    let mut block = open_block();
    block.rate = rate(2, 60_000);
    let h = Harness::new(table(vec![("s", block)]));
    allowed(h.decide("s", &simple("a")));
    h.clock.advance(10_500);
    allowed(h.decide("s", &simple("b")));
    let d = denial(h.decide("s", &simple("c")));
    assert_eq!(d.reason(), builtin::RATE_LIMIT);
    assert!(d.retryable());
    // "a" leaves the window 60 s after it was admitted: 49.5 s from now, rounded up.
    assert_eq!(
        data_text(&d),
        r#"{"reason":"policy.rate_limit","server":"s","retryable":true,"retryAfter":50}"#
    );
    assert_eq!(
        d.message(),
        "Sampling denied: rate limit for server 's' reached; retry after 50s"
    );
    assert_eq!(d.expiry(), Expiry::At(h.clock.now() + 50_000));
    // Replayed until then, evaluated afresh at retryAfter.
    h.clock.advance(49_999);
    assert!(denial(h.decide("s", &simple("c"))).replayed());
    h.clock.advance(1);
    allowed(h.decide("s", &simple("c")));
}

#[test]
fn rate_limit_denial_expires_after_its_ttl() {
    with_each_store(rate_ttl_in);
}

fn rate_ttl_in(store: Arc<dyn DecisionStore>) {
    // A window longer than the ttl: the stored denial lasts exactly the ttl (60 s).
    let mut block = open_block();
    block.rate = rate(1, 3_600_000);
    let h = Harness::with_store(table(vec![("s", block)]), store);
    allowed(h.decide("s", &simple("a")));
    let d = denial(h.decide("s", &simple("b")));
    assert_eq!(d.expiry(), Expiry::At(t0() + 60_000));
    assert!(data_text(&d).ends_with(r#""retryAfter":3600}"#));
    h.clock.advance(59_999);
    assert!(denial(h.decide("s", &simple("b"))).replayed());
    h.clock.advance(1);
    let fresh = denial(h.decide("s", &simple("b")));
    assert!(
        !fresh.replayed(),
        "after the ttl the request is evaluated afresh"
    );
    assert!(data_text(&fresh).ends_with(r#""retryAfter":3540}"#));
}

/// Runs `check` against the in-memory store and, with the `sqlite` feature, a fresh SQLite file.
fn with_each_store(check: impl Fn(Arc<dyn DecisionStore>)) {
    check(Arc::new(MemoryStore::new()));
    #[cfg(feature = "sqlite")]
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = mcpolicy_runtime::store::SqliteStore::open(dir.path().join("d.db"))
            .expect("open store");
        check(Arc::new(store));
    }
}

#[test]
fn budget_denial_expires_at_resets_at() {
    with_each_store(budget_denial_expires_at_resets_at_in);
}

fn budget_denial_expires_at_resets_at_in(store: Arc<dyn DecisionStore>) {
    let mut block = open_block();
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        2,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::with_store(table(vec![("release-notes", block)]), store);
    allowed(h.decide("release-notes", &simple("1")));
    allowed(h.decide("release-notes", &simple("2")));
    let d = denial(h.decide("release-notes", &simple("3")));
    assert_eq!(d.reason(), builtin::BUDGET_EXHAUSTED);
    assert!(!d.retryable());
    assert_eq!(
        d.message(),
        "Sampling denied: daily budget for server 'release-notes' exhausted"
    );
    let midnight = timestamp(2026, 3, 11, 0, 0, 0);
    assert_eq!(d.expiry(), Expiry::At(midnight));
    assert!(data_text(&d).ends_with(r#""resetsAt":"2026-03-11T00:00:00Z"}"#));
    h.clock.set(midnight - 1);
    let replay = denial(h.decide("release-notes", &simple("3")));
    assert!(replay.replayed());
    assert_eq!(replay.message(), d.message());
    h.clock.set(midnight);
    allowed(h.decide("release-notes", &simple("3")));
}

#[test]
fn calendar_windows_reset_in_utc() {
    for (unit, reset) in [
        (CalendarUnit::Hour, timestamp(2026, 3, 10, 16, 0, 0)),
        (CalendarUnit::Day, timestamp(2026, 3, 11, 0, 0, 0)),
        (CalendarUnit::Week, timestamp(2026, 3, 16, 0, 0, 0)),
        (CalendarUnit::Month, timestamp(2026, 4, 1, 0, 0, 0)),
    ] {
        let mut block = open_block();
        block.budgets = vec![budget(BudgetMetric::Requests, 1, Window::Calendar(unit))];
        let h = Harness::new(table(vec![("s", block)]));
        allowed(h.decide("s", &simple("1")));
        let d = denial(h.decide("s", &simple("2")));
        assert_eq!(d.expiry(), Expiry::At(reset), "{unit:?}");
        let expected = format!(
            r#""resetsAt":"{}"}}"#,
            mcpolicy_runtime::clock::format_rfc3339(reset)
        );
        assert!(
            data_text(&d).ends_with(&expected),
            "{unit:?}: {}",
            data_text(&d)
        );
        h.clock.set(reset);
        allowed(h.decide("s", &simple("2")));
    }
}

#[test]
fn rolling_budget_resets_when_spend_leaves_the_window() {
    let mut block = open_block();
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        1,
        Window::RollingMs(86_400_000),
    )];
    let h = Harness::new(table(vec![("s", block)]));
    h.clock.advance(250); // not a whole second
    allowed(h.decide("s", &simple("1")));
    let d = denial(h.decide("s", &simple("2")));
    assert_eq!(
        d.message(),
        "Sampling denied: 24h budget for server 's' exhausted"
    );
    // Spend at t0+250ms leaves at t0+24h+250ms; announced rounded up to the second.
    let reset = t0() + 86_400_000 + 1_000;
    assert_eq!(d.expiry(), Expiry::At(reset));
    h.clock.set(reset);
    allowed(h.decide("s", &simple("2")));
}

#[test]
fn token_budget_reserves_max_tokens_and_settles() {
    with_each_store(tokens_in);
}

fn tokens_in(store: Arc<dyn DecisionStore>) {
    let mut block = open_block();
    block.max_tokens = Some(600);
    block.budgets = vec![budget(
        BudgetMetric::Tokens,
        1000,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::with_store(table(vec![("s", block)]), store);
    let ask = |text: &str, max: u64| {
        params(
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max}),
        )
    };
    // A float spelling is clamped like any other.
    let float = params(json!({"messages": [], "maxTokens": 9e3}));
    let grant = trimmed(h.decide("s", &float));
    assert_eq!(grant.params(float.params())["maxTokens"], 600);
    grant.complete(0).expect("settle");
    // 9000 is clamped to 600 and 600 is reserved.
    let first = trimmed(h.decide("s", &ask("1", 9000)));
    // 600 + 600 > 1000.
    assert_eq!(
        denial(h.decide("s", &ask("2", 600))).reason(),
        builtin::BUDGET_EXHAUSTED
    );
    // The first completion used 100 tokens: 900 more fit now.
    first.complete(100).expect("settle");
    allowed(h.decide("s", &ask("3", 600)));
    assert_eq!(
        denial(h.decide("s", &ask("4", 301))).reason(),
        builtin::BUDGET_EXHAUSTED
    );
    allowed(h.decide("s", &ask("5", 300)));
    assert_eq!(
        denial(h.decide("s", &ask("6", 1))).reason(),
        builtin::BUDGET_EXHAUSTED
    );
}

#[test]
fn a_request_larger_than_the_whole_budget_is_denied_until_the_reset() {
    let mut block = open_block();
    block.budgets = vec![budget(
        BudgetMetric::Tokens,
        100,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::new(table(vec![("s", block)]));
    let d = denial(h.decide("s", &params(json!({"messages": [], "maxTokens": 500}))));
    assert_eq!(d.expiry(), Expiry::At(timestamp(2026, 3, 11, 0, 0, 0)));
}

#[test]
fn consent_first_is_asked_once_and_stored_approval_still_counts_rate() {
    with_each_store(consent_first_is_asked_once_and_stored_approval_still_counts_rate_in);
}

fn consent_first_is_asked_once_and_stored_approval_still_counts_rate_in(
    store: Arc<dyn DecisionStore>,
) {
    let mut block = open_block();
    block.consent = Consent::First;
    block.rate = rate(2, 60_000);
    let h = Harness::with_store(table(vec![("s", block)]), store);
    let request = simple("same");
    let p = pending(h.decide("s", &request));
    assert_eq!(p.server_id(), "s");
    let grant = allowed(resolve(p, true));
    assert!(!grant.replayed());
    // Stored under the approval key (`docs/spec/identity.md`), never the refusal key.
    let approval = grant
        .approval_key()
        .expect("consent first has an approval key");
    assert!(
        h.store
            .get(&DecisionKey::new("s", grant.identity()))
            .expect("get")
            .is_none()
    );
    let key = DecisionKey::new("s", approval);
    let stored = h.store.get(&key).expect("get").expect("approval stored");
    assert_eq!(stored.verdict, Verdict::Allow);
    assert_eq!(&*stored.reason, builtin::USER_APPROVED);
    assert_eq!(stored.expires_at, None);
    // Second time: no question, but the rate counts it.
    assert!(allowed(h.decide("s", &request)).replayed());
    assert_eq!(
        denial(h.decide("s", &request)).reason(),
        builtin::RATE_LIMIT
    );
}

#[test]
fn consent_always_asks_every_time() {
    let mut block = open_block();
    block.consent = Consent::Always;
    let h = Harness::new(table(vec![("s", block)]));
    let request = simple("same");
    for _ in 0..3 {
        let p = pending(h.decide("s", &request));
        allowed(resolve(p, true));
    }
    let p = pending(h.decide("s", &request));
    let d = denial(resolve(p, false));
    assert_eq!(d.code(), builtin::USER_REFUSAL_CODE);
    // A refusal is remembered even under `always`.
    assert!(denial(h.decide("s", &request)).replayed());
}

#[test]
fn refused_consent_returns_the_reserved_budget() {
    let mut block = open_block();
    block.consent = Consent::First;
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        1,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::new(table(vec![("s", block)]));
    let p = pending(h.decide("s", &simple("no")));
    denial(resolve(p, false));
    // The refused request did not use the day's one request.
    let p = pending(h.decide("s", &simple("yes")));
    allowed(resolve(p, true));
}

#[test]
fn trimmed_request_under_consent_stays_a_trim() {
    let mut block = open_block();
    block.consent = Consent::First;
    block.max_tokens = Some(10);
    let h = Harness::new(table(vec![("s", block)]));
    let p = pending(h.decide("s", &simple("x")));
    assert_eq!(p.lowered().max_tokens, Some(10));
    trimmed(resolve(p, true));
    trimmed(h.decide("s", &simple("x")));
}

#[test]
fn deadline_miss_is_stored_briefly() {
    let mut block = open_block();
    block.deadline = deadline(60_000);
    let h = Harness::new(table(vec![("s", block)]));
    let grant = allowed(h.decide("s", &simple("slow")));
    let d = grant.deadline_missed().expect("report");
    assert_eq!(d.reason(), builtin::DEADLINE);
    assert!(d.retryable());
    assert_eq!(
        data_text(&d),
        r#"{"reason":"policy.deadline","server":"s","retryable":true,"retryAfter":30}"#
    );
    assert_eq!(
        d.message(),
        "Sampling denied: the completion for server 's' missed its 1m deadline"
    );
    let replay = denial(h.decide("s", &simple("slow")));
    assert!(replay.replayed());
    assert_eq!(replay.reply(None), d.reply(None));
    h.clock.advance(30_000);
    allowed(h.decide("s", &simple("slow")));
}

#[test]
fn redeclared_reasons_change_code_retryability_and_ttl() {
    let mut r = reasons();
    let spec = r.get_mut(builtin::BUDGET_EXHAUSTED).expect("builtin");
    spec.code = 1234;
    spec.ttl = Ttl::AfterMs(1_000);
    spec.message = "no more for {server} until {resetsAt} ({window}, {reason})".into();
    let mut rate_spec = r[builtin::RATE_LIMIT].clone();
    rate_spec.ttl = Ttl::None;
    r.insert(builtin::RATE_LIMIT.into(), rate_spec);
    let mut block = open_block();
    // A limit of 1 spent first (a table holds no limit of 0).
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        1,
        Window::Calendar(CalendarUnit::Week),
    )];
    let mut rated = open_block();
    rated.rate = rate(1, 60_000);
    let h = Harness::new(table_with(
        ProtocolRevision::V2025_11_25,
        r,
        vec![("s", block), ("r", rated)],
        open_block(),
    ));
    allowed(h.decide("s", &simple("w")));
    let d = denial(h.decide("s", &simple("x")));
    assert_eq!(d.code(), 1234);
    assert_eq!(
        d.message(),
        "no more for s until 2026-03-16T00:00:00Z (weekly, policy.budget_exhausted)"
    );
    assert_eq!(d.expiry(), Expiry::At(t0() + 1_000));
    // ttl none: not stored, every retry is evaluated (and counted) afresh.
    allowed(h.decide("r", &simple("x")));
    let d = denial(h.decide("r", &simple("y")));
    assert_eq!(d.expiry(), Expiry::NotStored);
    assert!(!denial(h.decide("r", &simple("y"))).replayed());
}

#[test]
fn custom_reason_with_unknown_retryability_is_not_retryable() {
    let mut r = reasons();
    r.insert(
        "org.no_weekend".into(),
        mcpolicy_runtime::table::ReasonSpec {
            retryable: false,
            ttl: Ttl::Forever,
            code: -32011,
            message: "Sampling denied: {server} rests".into(),
        },
    );
    let mut block = open_block();
    block.sampling.enabled = false;
    block.sampling.reason = "org.no_weekend".into();
    let h = Harness::new(table_with(
        ProtocolRevision::V2025_11_25,
        r,
        vec![("s", block)],
        open_block(),
    ));
    let d = denial(h.decide("s", &simple("x")));
    assert_eq!(d.code(), -32011);
    assert_eq!(d.message(), "Sampling denied: s rests");
    assert!(!d.retryable());
}

#[test]
fn editing_one_block_invalidates_only_that_servers_decisions() {
    with_each_store(invalidation_in);
}

fn invalidation_in(store: Arc<dyn DecisionStore>) {
    let mut off = open_block();
    off.sampling.enabled = false;
    let h = Harness::with_store(table(vec![("a", off.clone()), ("b", off.clone())]), store);
    denial(h.decide("a", &simple("x")));
    denial(h.decide("b", &simple("x")));
    // Edit a's block only.
    let mut edited = off.clone();
    edited.max_messages = limit(100);
    let h2 = h.reload(table(vec![("a", edited), ("b", off.clone())]));
    let a = denial(h2.decide("a", &simple("x")));
    assert!(!a.replayed(), "a's decisions were invalidated by the edit");
    let b = denial(h2.decide("b", &simple("x")));
    assert!(b.replayed(), "b's block did not change");
    // Turning sampling back on for a takes effect at once.
    let h3 = h2.reload(table(vec![("a", open_block()), ("b", off)]));
    allowed(h3.decide("a", &simple("x")));
    assert!(denial(h3.decide("b", &simple("x"))).replayed());
}

#[test]
fn editing_a_block_keeps_what_was_spent() {
    let mut block = open_block();
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        2,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::new(table(vec![("s", block.clone())]));
    allowed(h.decide("s", &simple("1")));
    allowed(h.decide("s", &simple("2")));
    // Raise the limit: the two requests already spent still count.
    block.budgets[0].limit = 3;
    block.rate = rate(100, 60_000);
    let h2 = h.reload(table(vec![("s", block)]));
    allowed(h2.decide("s", &simple("3")));
    assert_eq!(
        denial(h2.decide("s", &simple("4"))).reason(),
        builtin::BUDGET_EXHAUSTED
    );
}

#[test]
fn first_matching_block_wins() {
    let mut off = open_block();
    off.sampling.enabled = false;
    let mut small = open_block();
    small.max_tokens = Some(1);
    let h = Harness::new(table(vec![
        ("github-*", off.clone()),
        ("github-ok", small.clone()),
        ("notes", small),
        ("*-notes", off),
    ]));
    let t = h.engine.policy().table().clone();
    for server in [
        "github-ok",
        "github-",
        "notes",
        "release-notes",
        "other",
        "",
    ] {
        let expected_off = !t.entry_for(server).block.sampling.enabled;
        let d = h.decide(server, &simple("x"));
        assert_eq!(matches!(d, Decision::Deny(_)), expected_off, "{server}");
    }
    assert!(matches!(h.decide("notes", &simple("x")), Decision::Trim(_)));
}

#[test]
fn concurrent_deciders_never_overspend() {
    let mut block = open_block();
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        500,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Arc::new(Harness::new(table(vec![("s", block)])));
    let admitted: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let h = h.clone();
                scope.spawn(move || {
                    (0..1000)
                        .filter(|i| {
                            matches!(
                                h.decide("s", &simple(&format!("{t}-{i}"))),
                                Decision::Allow(_) | Decision::Trim(_)
                            )
                        })
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|j| j.join().expect("thread")).sum()
    });
    assert_eq!(admitted, 500);
}

/// A store whose every call fails.
#[derive(Debug)]
struct BrokenStore;

impl DecisionStore for BrokenStore {
    fn replay(
        &self,
        _: &DecisionKey,
        _: &str,
        _: i64,
    ) -> Result<Option<mcpolicy_runtime::store::StoredDecision>, mcpolicy_runtime::store::StoreError>
    {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn admit(
        &self,
        _: &str,
        _: &[mcpolicy_runtime::store::LimitCheck],
        _: i64,
    ) -> Result<mcpolicy_runtime::store::Admission, mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn settle(
        &self,
        _: &str,
        _: mcpolicy_runtime::store::Reservation,
        _: &str,
        _: u64,
    ) -> Result<(), mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn record(
        &self,
        _: &DecisionKey,
        _: &mcpolicy_runtime::store::StoredDecision,
    ) -> Result<(), mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn get(
        &self,
        _: &DecisionKey,
    ) -> Result<Option<mcpolicy_runtime::store::StoredDecision>, mcpolicy_runtime::store::StoreError>
    {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn purge_stale(
        &self,
        _: &str,
        _: &str,
        _: i64,
    ) -> Result<u64, mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn server_stats(
        &self,
        _: &str,
    ) -> Result<mcpolicy_runtime::store::ServerStats, mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn flush(&self) -> Result<(), mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
    fn replay_or_admit(
        &self,
        _: &DecisionKey,
        _: Option<&str>,
        _: &str,
        _: i64,
        _: &mut Vec<mcpolicy_runtime::store::LimitCheck>,
        _: &mut dyn FnMut(
            Option<&mcpolicy_runtime::store::StoredDecision>,
            &mut Vec<mcpolicy_runtime::store::LimitCheck>,
        ) -> mcpolicy_runtime::store::Evaluation,
    ) -> Result<mcpolicy_runtime::store::ReplayOrAdmit, mcpolicy_runtime::store::StoreError> {
        Err(mcpolicy_runtime::store::StoreError::Poisoned)
    }
}

#[test]
fn a_failing_store_refuses_with_a_frame() {
    let h = Harness::with_store(table(vec![]), Arc::new(BrokenStore));
    let bytes = br#"{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#;
    match h.engine.decide("s", bytes, &Default::default()) {
        mcpolicy_runtime::engine::Answer::Failed { reply, .. } => {
            let f = parse(&reply);
            assert_eq!(f["id"], 9);
            assert_eq!(f["error"]["code"], -32603);
            assert_eq!(f["error"]["data"]["reason"], "runtime.store_unavailable");
        }
        other => panic!("{other:?}"),
    }
}

/// 8 threads × 1,000 distinct requests through the engine against a budget of
/// 500 requests: exactly 500 are allowed, with either store (the SQLite store
/// replays and admits in one transaction, `replay_or_admit`).
#[test]
fn engine_threads_never_overspend_a_budget() {
    with_each_store(|store| {
        let mut block = open_block();
        block.budgets = vec![budget(
            BudgetMetric::Requests,
            500,
            Window::Calendar(CalendarUnit::Day),
        )];
        let h = Arc::new(Harness::with_store(table(vec![("s", block)]), store));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let h = Arc::clone(&h);
                std::thread::spawn(move || {
                    (0..1_000)
                        .filter(|i| {
                            let request = simple(&format!("{t}-{i}"));
                            matches!(
                                h.decide("s", &request),
                                Decision::Allow(_) | Decision::Trim(_)
                            )
                        })
                        .count()
                })
            })
            .collect();
        let allowed: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        assert_eq!(allowed, 500);
    });
}

#[test]
fn budget_and_rate_messages_fill_limit_and_window_fresh_and_replayed() {
    with_each_store(limit_and_window_in);
}

fn limit_and_window_in(store: Arc<dyn DecisionStore>) {
    let mut r = reasons();
    let spec = |message: &str| mcpolicy_runtime::table::ReasonSpec {
        retryable: false,
        ttl: Ttl::UntilReset,
        code: -32012,
        message: message.into(),
    };
    r.insert(
        "org.spent".into(),
        spec("{server}: {window} limit of {limit} used up; resets at {resetsAt}"),
    );
    r.insert(
        "org.slow_down".into(),
        mcpolicy_runtime::table::ReasonSpec {
            retryable: true,
            ttl: Ttl::AfterMs(60_000),
            ..spec("{server}: at most {limit} per {window}; retry in {retryAfter}s")
        },
    );
    let mut budgeted = open_block();
    let mut tokens = budget(
        BudgetMetric::Tokens,
        1_000,
        Window::Calendar(CalendarUnit::Day),
    );
    tokens.reason = "org.spent".into();
    budgeted.budgets = vec![tokens];
    let mut limited = open_block();
    limited.rate = rate(1, 60_000).map(|mut rate| {
        rate.reason = "org.slow_down".into();
        rate
    });
    let h = Harness::with_store(
        table_with(
            ProtocolRevision::V2025_11_25,
            r,
            vec![("b", budgeted), ("r", limited)],
            open_block(),
        ),
        store,
    );

    let big = params(serde_json::json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "big"}}],
        "maxTokens": 5_000,
    }));
    let d = denial(h.decide("b", &big));
    assert_eq!(
        d.message(),
        "b: daily limit of 1000 tokens used up; resets at 2026-03-11T00:00:00Z"
    );
    let replay = denial(h.decide("b", &big));
    assert!(replay.replayed());
    assert_eq!(replay.reply(None), d.reply(None));

    allowed(h.decide("r", &simple("1")));
    let d = denial(h.decide("r", &simple("2")));
    assert_eq!(
        d.message(),
        format!("r: at most 1 request per 1m; retry in {}s", 60)
    );
    let replay = denial(h.decide("r", &simple("2")));
    assert!(replay.replayed());
    assert_eq!(replay.reply(None), d.reply(None));
}

/// Two engines share one store and one server id under two policies (two
/// clients, or a policy edited while an older session runs): the user's
/// refusal stored under A's policy survives everything B decides and
/// records, and A replays it without asking again (`docs/spec/store.md`,
/// "Digests and staleness"). Before, B's first record purged every decision
/// of the server made under another digest, `user.denied` included.
fn two_policies_keep_each_others_user_answers(store: Arc<dyn DecisionStore>) {
    let mut asking = open_block();
    asking.consent = Consent::First;
    let mut limited = asking.clone();
    limited.max_input = limit(64);
    let a = Harness::with_store(table(vec![("s", asking)]), Arc::clone(&store));
    let b = a.reload(table(vec![("s", limited)]));
    let request = seed_request("summarise my mail");
    let Decision::NeedsConsent(pending) = a.decide("s", &request) else {
        panic!("A asks its user");
    };
    let refused = pending.refuse().recorded().expect("store");
    assert_eq!(refused.reason(), "user.denied");
    // B decides for the same server: it stores a denial of its own, and a
    // user answer of its own.
    let big = seed_request(&"x".repeat(500));
    assert!(
        matches!(b.decide("s", &big), Decision::Deny(d) if d.reason() == "policy.input_too_large")
    );
    let Decision::NeedsConsent(pending) = b.decide("s", &seed_request("other")) else {
        panic!("B asks its user");
    };
    pending.approve().expect("store");
    b.clock.advance(60_000);
    // A's refusal is still the user's word, replayed without a prompt.
    match a.decide("s", &request) {
        Decision::Deny(denial) => {
            assert_eq!(denial.reason(), "user.denied");
            assert!(denial.replayed(), "answered from the store");
        }
        other => panic!("A asked its user again: {other:?}"),
    }
    // And B's own decisions are still there for B.
    assert!(matches!(b.decide("s", &big), Decision::Deny(d) if d.replayed()));
}

#[test]
fn two_policies_keep_each_others_user_answers_memory() {
    two_policies_keep_each_others_user_answers(Arc::new(MemoryStore::new()));
}

#[cfg(feature = "sqlite")]
#[test]
fn two_policies_keep_each_others_user_answers_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = mcpolicy_runtime::store::SqliteStore::open(dir.path().join("decisions.db"))
        .expect("open store");
    two_policies_keep_each_others_user_answers(Arc::new(store));
}

/// A clock at `Millis::MAX` (or before the year 0) refuses every rate and
/// budget, and what it refuses is not stored: once the clock is sane again
/// the same request is decided afresh, not denied until `Millis::MAX`
/// (`docs/spec/store.md`, "Time outside the calendar").
#[test]
fn limits_refuse_outside_the_calendar_and_store_nothing_there() {
    let mut block = open_block();
    block.rate = rate(1, 60_000);
    block.budgets = vec![budget(
        BudgetMetric::Requests,
        5,
        Window::Calendar(CalendarUnit::Day),
    )];
    let h = Harness::new(table(vec![("s", block)]));
    let request = seed_request("tick");
    for extreme in [
        i64::MAX,
        i64::MIN,
        mcpolicy_runtime::store::CALENDAR_LAST + 1,
    ] {
        h.clock.set(extreme);
        for _ in 0..3 {
            match h.decide("s", &request) {
                Decision::Deny(denial) => assert!(!denial.replayed(), "stored at {extreme}"),
                other => panic!("admitted at {extreme}: {other:?}"),
            }
        }
    }
    h.clock.set(t0());
    assert!(matches!(h.decide("s", &request), Decision::Allow(_)));
}
