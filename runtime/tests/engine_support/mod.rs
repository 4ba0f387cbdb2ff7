//! Shared helpers of the engine tests: tables built in Rust (digests from
//! `table::block_digest`), an engine over a manual clock, requests from JSON.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use mcpolicy_runtime::Policy;
use mcpolicy_runtime::clock::{self, ManualClock};
use mcpolicy_runtime::engine::{ClientContext, Decision, Denial, Engine, Grant, PendingConsent};
use mcpolicy_runtime::request::{self, SamplingRequest};
use mcpolicy_runtime::store::{DecisionStore, MemoryStore, Millis};
use mcpolicy_runtime::table::{
    Budget, BudgetMetric, Consent, ContextScope, Deadline, EffectiveBlock, Limit, ProtocolRevision,
    Rate, ReasonSpec, ServerEntry, Switch, TABLE_FORMAT, Table, Window, block_digest, builtin,
};
use serde_json::{Value, json};

/// The table's default error code in these tests.
pub const CODE: i32 = -32010;

/// [`CODE`] as a denial reports it.
pub const CODE_I32: i32 = -32010;

/// Wednesday 2026-03-10 15:30:00Z, a time with room before midnight.
pub fn t0() -> Millis {
    clock::timestamp(2026, 3, 10, 15, 30, 0)
}

/// Every built-in reason with its default spec.
pub fn reasons() -> BTreeMap<String, ReasonSpec> {
    builtin::ALL
        .iter()
        .map(|b| (b.name.to_owned(), builtin::spec(b, CODE)))
        .collect()
}

/// A block that allows everything and asks nobody.
pub fn open_block() -> EffectiveBlock {
    EffectiveBlock {
        sampling: Switch {
            enabled: true,
            reason: builtin::SAMPLING_DISABLED.into(),
        },
        tools: Switch {
            enabled: true,
            reason: builtin::TOOLS_DISABLED.into(),
        },
        max_context: ContextScope::AllServers,
        max_input: None,
        max_messages: None,
        max_tokens: None,
        rate: None,
        budgets: Vec::new(),
        deadline: None,
        consent: Consent::Never,
        models: None,
        retry_alert: None,
    }
}

/// `rate count per window_ms`.
pub fn rate(count: u64, window_ms: u64) -> Option<Rate> {
    Some(Rate {
        count,
        window_ms,
        reason: builtin::RATE_LIMIT.into(),
    })
}

/// A budget with the built-in reason.
pub fn budget(metric: BudgetMetric, limit: u64, window: Window) -> Budget {
    Budget {
        metric,
        limit,
        window,
        reason: builtin::BUDGET_EXHAUSTED.into(),
    }
}

/// A limit with the built-in input reason.
pub fn limit(max: u64) -> Option<Limit> {
    Some(Limit {
        max,
        reason: builtin::INPUT_TOO_LARGE.into(),
    })
}

/// A deadline with the built-in reason.
pub fn deadline(ms: u64) -> Option<Deadline> {
    Some(Deadline {
        ms,
        reason: builtin::DEADLINE.into(),
    })
}

/// One server entry with its digest.
pub fn entry(
    pattern: &str,
    block: EffectiveBlock,
    reasons: &BTreeMap<String, ReasonSpec>,
) -> ServerEntry {
    ServerEntry {
        pattern: pattern.to_owned(),
        digest: block_digest(&block, reasons),
        block,
    }
}

/// A verified table of `servers` (in order) over a fallback block.
pub fn table_with(
    protocol: ProtocolRevision,
    reasons: BTreeMap<String, ReasonSpec>,
    servers: Vec<(&str, EffectiveBlock)>,
    fallback: EffectiveBlock,
) -> Table {
    let table = Table {
        format: TABLE_FORMAT.to_owned(),
        protocol,
        error_code: CODE,
        identity: [
            "systemPrompt",
            "messages",
            "includeContext",
            "modelPreferences",
        ]
        .map(String::from)
        .to_vec(),
        servers: servers
            .into_iter()
            .map(|(p, b)| entry(p, b, &reasons))
            .collect(),
        fallback: entry("*", fallback, &reasons),
        reasons,
    };
    // Digests cover the protocol when it is not the default.
    let mut table = table;
    for entry in table
        .servers
        .iter_mut()
        .chain(std::iter::once(&mut table.fallback))
    {
        entry.digest = mcpolicy_runtime::table::entry_digest(
            &entry.block,
            &table.reasons,
            &table.identity,
            table.protocol,
        );
    }
    table.verify().expect("test table verifies");
    // The JSON form round-trips: what the compiler would write, the runtime reads.
    let reread = Table::from_json(table.to_json().as_bytes()).expect("table re-reads");
    assert_eq!(reread, table);
    table
}

/// A 2025-11-25 table with the built-in reasons.
pub fn table(servers: Vec<(&str, EffectiveBlock)>) -> Table {
    table_with(
        ProtocolRevision::V2025_11_25,
        reasons(),
        servers,
        open_block(),
    )
}

/// An engine, its store and its clock.
pub struct Harness {
    pub engine: Engine,
    pub store: Arc<dyn DecisionStore>,
    pub clock: Arc<ManualClock>,
}

impl Harness {
    /// An engine over `table` with a fresh in-memory store, at [`t0`].
    pub fn new(table: Table) -> Self {
        Self::with_store(table, Arc::new(MemoryStore::new()))
    }

    /// An engine over `table` and an existing store, at [`t0`].
    pub fn with_store(table: Table, store: Arc<dyn DecisionStore>) -> Self {
        let clock = Arc::new(ManualClock::new(t0()));
        Harness {
            engine: Engine::new(policy(table), store.clone(), clock.clone()),
            store,
            clock,
        }
    }

    /// A new engine (e.g. after a policy edit) over the same store and clock.
    pub fn reload(&self, table: Table) -> Self {
        Harness {
            engine: Engine::new(policy(table), self.store.clone(), self.clock.clone()),
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }

    /// Decides `request` for `server` with a client that declared every capability.
    pub fn decide(&self, server: &str, request: &SamplingRequest) -> Decision {
        self.engine
            .decide_request(server, request, &ClientContext::with_sampling_context(true))
            .expect("the store does not fail")
    }
}

/// A validated request from JSON params.
pub fn params(params: Value) -> SamplingRequest {
    request::validate_sampling(json!({
        "jsonrpc": "2.0",
        "id": 47,
        "method": "sampling/createMessage",
        "params": params,
    }))
    .expect("valid test request")
}

/// A request with one user message `text`.
pub fn simple(text: &str) -> SamplingRequest {
    params(json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        "maxTokens": 100,
    }))
}

/// The verified policy of a test table.
pub fn policy(table: Table) -> Policy {
    Policy::verify(table).expect("test table verifies")
}

/// The parsed reply.
pub fn parse(frame: &[u8]) -> Value {
    serde_json::from_slice(frame).expect("a frame is JSON")
}

/// The `error.data` text of a denial exactly as its reply carries it.
pub fn data_text(denial: &Denial) -> String {
    let reply = String::from_utf8(denial.reply(None)).expect("a reply is UTF-8");
    // The message is a JSON string, in which `"` is escaped: `,"data":` only
    // occurs as the key; the reply ends with the error's and the frame's `}`.
    let start = reply.rfind(",\"data\":").expect("a denial has data") + 8;
    reply[start..reply.len() - 2].to_owned()
}

/// The user's answer to a consent question, as the decision it leads to:
/// an allow or a trim when approved, the denial when refused.
pub fn resolve(pending: PendingConsent, approved: bool) -> Decision {
    if approved {
        let grant = pending.approve().expect("store");
        if grant.is_trim() {
            Decision::Trim(grant)
        } else {
            Decision::Allow(grant)
        }
    } else {
        Decision::Deny(pending.refuse().recorded().expect("store"))
    }
}

/// The reason of a denial, `None` for any other decision.
pub fn deny_reason(decision: &Decision) -> Option<&str> {
    match decision {
        Decision::Deny(denial) => Some(denial.reason()),
        _ => None,
    }
}

/// The grant of an allow or a trim, `None` for any other decision.
pub fn grant_of(decision: &Decision) -> Option<&Grant> {
    match decision {
        Decision::Allow(grant) | Decision::Trim(grant) => Some(grant),
        _ => None,
    }
}
