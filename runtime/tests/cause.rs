//! Every decision carries its cause (`docs/spec/evaluation.md`, "The cause
//! of a decision"): which block, which
//! statement, which evaluation step — through replays too. A seeded random
//! policy and a random run of requests, consent answers, completions and
//! missed deadlines are checked against what the policy says: the statement
//! named denies with the reason sent, at its step; a replayed denial names
//! the statement whose fresh denial was stored, with its message. The
//! policies include reasons shared by two statements (`as NAME`): the two
//! input limits, two rolling budgets, the rate and a retryable deadline,
//! under an identity of the system prompt alone, where only the statement
//! the store recorded (schema 4) tells them apart. Fast by default;
//! `PROPTEST_CASES` sets a long run.

mod engine_support;

use std::collections::HashMap;

use engine_support::*;
use mcpolicy_runtime::engine::{
    BlockRef, Cause, ClientContext, Decision, Denial, Expiry, Grant, Statement, Step,
};
use mcpolicy_runtime::table::{
    BudgetMetric, CalendarUnit, Consent, ContextScope, EffectiveBlock, ReasonSpec, Table, Ttl,
    Window, builtin,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `default_cases` cases, or `PROPTEST_CASES` from the environment for a
/// long run (`PROPTEST_CASES=10000 cargo test -p mcpolicy-runtime --test cause`).
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

/// The step at which a statement decides, as `docs/spec/evaluation.md` numbers them.
fn step_of(statement: Statement) -> Step {
    match statement {
        Statement::Sampling | Statement::Tools => Step::Switches,
        Statement::MaxMessages | Statement::MaxInput => Step::InputLimits,
        Statement::MaxContext | Statement::MaxTokens | Statement::Models => Step::Trims,
        Statement::Rate => Step::Rate,
        Statement::Budget(_) => Step::Budgets,
        Statement::Consent => Step::Consent,
        // A missed deadline is reported on a grant: step 10's deadline.
        Statement::Deadline => Step::Allow,
        other => panic!("a statement this test does not know: {other:?}"),
    }
}

/// The reason a statement of `block` denies with.
fn reason_of(block: &EffectiveBlock, statement: Statement) -> Option<&str> {
    Some(match statement {
        Statement::Sampling => &block.sampling.reason,
        Statement::Tools => &block.tools.reason,
        Statement::MaxMessages => &block.max_messages.as_ref()?.reason,
        Statement::MaxInput => &block.max_input.as_ref()?.reason,
        Statement::Rate => &block.rate.as_ref()?.reason,
        Statement::Budget(i) => &block.budgets.get(i)?.reason,
        Statement::Deadline => block
            .deadline
            .as_ref()
            .map_or(builtin::DEADLINE, |d| d.reason.as_str()),
        Statement::Consent => builtin::USER_DENIED,
        _ => return None,
    })
}

/// The governing entry of `server`, as the table says.
fn block_ref(table: &Table, server: &str) -> BlockRef {
    let entry = table.entry_for(server);
    BlockRef {
        entry: table
            .servers
            .iter()
            .position(|e| e.pattern == entry.pattern),
        pattern: entry.pattern.as_str().into(),
    }
}

/// Statements that share one reason in a generated policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Share {
    Nothing,
    /// `max_messages` and `max_input`.
    InputLimits,
    /// The token budget and a second rolling budget over requests.
    RollingBudgets,
    /// The rate and the deadline, with a retryable reason stored for a while.
    RateAndDeadline,
}

#[derive(Debug, Clone)]
struct Policy {
    sampling_off: bool,
    tools_off: bool,
    max_messages: Option<u64>,
    max_input: Option<u64>,
    /// Which statements deny as one reason (`as NAME`).
    share: Share,
    /// The identity is the system prompt alone, so requests with other
    /// messages replay one another's decisions.
    system_prompt_identity: bool,
    max_context: ContextScope,
    max_tokens: Option<u64>,
    models: bool,
    rate: Option<u64>,
    request_budget: Option<u64>,
    token_budget: Option<u64>,
    deadline: bool,
    consent: Consent,
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        (
            prop::bool::weighted(0.1),
            any::<bool>(),
            prop::option::of(1u64..4),
            prop::option::of(60u64..400),
            prop::sample::select(vec![
                Share::Nothing,
                Share::InputLimits,
                Share::RollingBudgets,
                Share::RateAndDeadline,
            ]),
            any::<bool>(),
        ),
        (
            prop::sample::select(ContextScope::ALL.to_vec()),
            prop::option::of(5u64..60),
            any::<bool>(),
            prop::option::of(1u64..4),
            prop::option::of(1u64..5),
            prop::option::of(20u64..200),
            any::<bool>(),
            prop::sample::select(vec![Consent::Never, Consent::First, Consent::Always]),
        ),
    )
        .prop_map(
            |(
                (sampling_off, tools_off, max_messages, max_input, share, system_prompt_identity),
                (
                    max_context,
                    max_tokens,
                    models,
                    rate,
                    request_budget,
                    token_budget,
                    deadline,
                    consent,
                ),
            )| Policy {
                sampling_off,
                tools_off,
                max_messages,
                max_input,
                share,
                system_prompt_identity,
                max_context,
                max_tokens,
                models,
                rate,
                request_budget,
                token_budget,
                deadline,
                consent,
            },
        )
}

fn table_of(p: &Policy) -> Table {
    let mut reasons = reasons();
    let mut block = open_block();
    block.sampling.enabled = !p.sampling_off;
    block.tools.enabled = !p.tools_off;
    block.max_messages = p.max_messages.and_then(limit);
    block.max_input = p.max_input.and_then(limit);
    if p.share == Share::InputLimits {
        let mut spec = builtin::spec(
            builtin::get(builtin::INPUT_TOO_LARGE).expect("built-in"),
            CODE,
        );
        spec.message = "{reason}: over {limit}".into();
        reasons.insert("acme.too_much".into(), spec);
        for l in [&mut block.max_messages, &mut block.max_input]
            .into_iter()
            .flatten()
        {
            l.reason = "acme.too_much".into();
        }
    }
    block.max_context = p.max_context;
    block.max_tokens = p.max_tokens;
    block.models = p.models.then(|| vec!["a*".to_owned()]);
    block.rate = p.rate.and_then(|n| rate(n, 60_000));
    block.budgets = [
        p.request_budget.map(|n| {
            budget(
                BudgetMetric::Requests,
                n,
                Window::Calendar(CalendarUnit::Day),
            )
        }),
        p.token_budget
            .map(|n| budget(BudgetMetric::Tokens, n, Window::RollingMs(3_600_000))),
    ]
    .into_iter()
    .flatten()
    .collect();
    block.deadline = if p.deadline { deadline(1_000) } else { None };
    if p.share == Share::RollingBudgets {
        let mut spec = builtin::spec(
            builtin::get(builtin::BUDGET_EXHAUSTED).expect("built-in"),
            CODE,
        );
        spec.message = "{reason}: {limit} per {window}".into();
        reasons.insert("acme.spent".into(), spec);
        block.budgets.push(budget(
            BudgetMetric::Requests,
            p.request_budget.unwrap_or(2),
            Window::RollingMs(7_200_000),
        ));
        for b in block
            .budgets
            .iter_mut()
            .filter(|b| matches!(b.window, Window::RollingMs(_)))
        {
            b.reason = "acme.spent".into();
        }
    }
    if p.share == Share::RateAndDeadline {
        reasons.insert(
            "acme.slow".into(),
            ReasonSpec {
                retryable: true,
                ttl: Ttl::AfterMs(30_000),
                code: CODE,
                message: "{reason}: {limit} per {window}, deadline {deadline}".into(),
            },
        );
        if let Some(rate) = &mut block.rate {
            rate.reason = "acme.slow".into();
        }
        if let Some(deadline) = &mut block.deadline {
            deadline.reason = "acme.slow".into();
        }
    }
    block.consent = p.consent;
    let mut table = table_with(
        Default::default(),
        reasons,
        vec![("other", open_block()), ("s", block)],
        open_block(),
    );
    if p.system_prompt_identity {
        table.identity = vec!["systemPrompt".to_owned()];
        // The digests cover an identity other than the default.
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
    }
    table
}

/// One step of a run.
#[derive(Debug, Clone)]
struct Request {
    /// Index into a small pool of prompts, so identities repeat (replays).
    prompt: usize,
    messages: usize,
    tools: bool,
    context: Option<&'static str>,
    max_tokens: u64,
    hint: Option<&'static str>,
    /// The user's answer if consent is asked.
    approve: bool,
    /// The completion misses its deadline (else it completes).
    miss: bool,
    usage: u64,
    wait_ms: i64,
}

fn request() -> impl Strategy<Value = Request> {
    (
        0usize..3,
        0usize..4,
        prop::bool::weighted(0.3),
        prop::sample::select(vec![
            None,
            Some("none"),
            Some("thisServer"),
            Some("allServers"),
        ]),
        1u64..100,
        prop::sample::select(vec![None, Some("abc"), Some("xyz")]),
        any::<bool>(),
        prop::bool::weighted(0.2),
        0u64..50,
        prop::sample::select(vec![0i64, 500, 20_000, 4_000_000]),
    )
        .prop_map(
            |(
                prompt,
                messages,
                tools,
                context,
                max_tokens,
                hint,
                approve,
                miss,
                usage,
                wait_ms,
            )| {
                Request {
                    prompt,
                    messages,
                    tools,
                    context,
                    max_tokens,
                    hint,
                    approve,
                    miss,
                    usage,
                    wait_ms,
                }
            },
        )
}

fn params_of(r: &Request) -> serde_json::Map<String, Value> {
    let long = "long ".repeat(20);
    let text = ["short", "a somewhat longer prompt", long.as_str()][r.prompt];
    let mut p = json!({
        "systemPrompt": (["be brief", "be kind"][r.prompt % 2]),
        "messages": (0..r.messages)
            .map(|_| json!({"role": "user", "content": {"type": "text", "text": text}}))
            .collect::<Vec<_>>(),
        "maxTokens": r.max_tokens,
    });
    if r.tools {
        p["tools"] = json!([{"name": "t", "inputSchema": {"type": "object"}}]);
    }
    if let Some(c) = r.context {
        p["includeContext"] = json!(c);
    }
    if let Some(h) = r.hint {
        p["modelPreferences"] = json!({"hints": [{"name": h}]});
    }
    match p {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// What the run remembers: the statement and message of the last stored
/// denial per identity.
type Stored = HashMap<String, (Statement, String)>;

/// Checks a fresh denial's cause and remembers it if it was stored.
fn fresh_denial(
    block: &EffectiveBlock,
    expected_block: &BlockRef,
    identity: &str,
    denial: &Denial,
    stored: &mut Stored,
) -> Result<(), TestCaseError> {
    let cause = denial.cause();
    prop_assert_eq!(&cause.block, expected_block);
    prop_assert!(!cause.replayed);
    let statement = cause.statement.expect("a denial names its statement");
    prop_assert_eq!(cause.step, step_of(statement), "{:?}", cause);
    // `consent` denies with the user's refusal, or, without asking, with
    // the consent cooldown (`docs/spec/evaluation.md`, step 9).
    let cooldown = statement == Statement::Consent && denial.reason() == builtin::CONSENT_COOLDOWN;
    prop_assert!(
        cooldown || reason_of(block, statement) == Some(denial.reason()),
        "{:?}: {}",
        cause,
        denial.reason()
    );
    if denial.expiry() != Expiry::NotStored {
        stored.insert(identity.to_owned(), (statement, denial.message()));
    }
    Ok(())
}

fn grant_cause(
    grant: &Grant,
    expected_block: &BlockRef,
    approved_now: bool,
) -> Result<(), TestCaseError> {
    let cause = grant.cause();
    prop_assert_eq!(&cause.block, expected_block);
    let annotations = grant.annotations();
    let first_trim = if annotations.context.is_some() {
        Some(Statement::MaxContext)
    } else if annotations.max_tokens.is_some() {
        Some(Statement::MaxTokens)
    } else if annotations.model.is_some() {
        Some(Statement::Models)
    } else {
        None
    };
    let expected = if approved_now {
        Cause {
            block: expected_block.clone(),
            statement: Some(Statement::Consent),
            step: Step::Consent,
            replayed: cause.replayed,
        }
    } else {
        Cause {
            block: expected_block.clone(),
            statement: first_trim,
            step: if first_trim.is_some() {
                Step::Trims
            } else {
                Step::Allow
            },
            replayed: cause.replayed,
        }
    };
    prop_assert_eq!(cause, &expected);
    prop_assert_eq!(grant.is_trim(), first_trim.is_some());
    Ok(())
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn every_decision_names_its_block_statement_and_step(
        p in policy(),
        run in prop::collection::vec(request(), 1..24),
    ) {
        let table = table_of(&p);
        let h = Harness::new(table.clone());
        let block = &table.entry_for("s").block;
        let expected_block = block_ref(&table, "s");
        prop_assert_eq!(expected_block.entry, Some(1));
        let ctx = ClientContext::with_sampling_context(true);
        let mut stored = Stored::new();
        for r in &run {
            h.clock.advance(r.wait_ms);
            let params = params_of(r);
            let identity = h.engine.identity("s", &params).into_string();
            let bytes = serde_json::to_vec(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": params,
            })).expect("serialise");
            let decision = match h.engine.decide("s", &bytes, &ctx) {
                mcpolicy_runtime::engine::Answer::Decided { decision, .. } => decision,
                other => return Err(TestCaseError::fail(format!("{other:?}"))),
            };
            prop_assert_eq!(decision.cause(), match &decision {
                Decision::Deny(d) => d.cause(),
                Decision::Allow(g) | Decision::Trim(g) => g.cause().clone(),
                Decision::NeedsConsent(c) => c.cause().clone(),
            });
            let grant = match decision {
                Decision::Deny(denial) if denial.replayed() => {
                    let cause = denial.cause();
                    prop_assert_eq!(&cause.block, &expected_block);
                    prop_assert!(cause.replayed);
                    prop_assert_eq!(cause.step, Step::Replay);
                    // The statement whose fresh denial was stored, and its message.
                    let first = stored.get(&identity);
                    prop_assert_eq!(cause.statement, first.map(|f| f.0), "{:?}", denial);
                    prop_assert_eq!(Some(denial.message()), first.map(|f| f.1.clone()));
                    continue;
                }
                Decision::Deny(denial) => {
                    fresh_denial(block, &expected_block, &identity, &denial, &mut stored)?;
                    continue;
                }
                Decision::Allow(grant) | Decision::Trim(grant) => {
                    grant_cause(&grant, &expected_block, false)?;
                    grant
                }
                Decision::NeedsConsent(pending) => {
                    let cause = pending.cause();
                    prop_assert_eq!(&cause.block, &expected_block);
                    prop_assert_eq!(cause.statement, Some(Statement::Consent));
                    prop_assert_eq!(cause.step, Step::Consent);
                    if !r.approve {
                        let denial = pending.refuse().recorded().expect("store");
                        fresh_denial(block, &expected_block, &identity, &denial, &mut stored)?;
                        continue;
                    }
                    let grant = pending.approve().expect("store");
                    grant_cause(&grant, &expected_block, true)?;
                    grant
                }
            };
            if r.miss {
                let denial = grant.deadline_missed().expect("store");
                fresh_denial(block, &expected_block, &identity, &denial, &mut stored)?;
                prop_assert_eq!(denial.cause().statement, Some(Statement::Deadline));
            } else {
                grant.complete(r.usage).expect("store");
            }
        }
        // Another server's block is named as its own entry, the fallback as none.
        let other = json!({"messages": [], "maxTokens": 1}).to_string();
        for (server, entry, pattern) in [("other", Some(0), "other"), ("nobody", None, "*")] {
            let mcpolicy_runtime::engine::Answer::Decided { decision, .. } =
                h.engine.decide(server, other.as_bytes(), &ctx)
            else {
                return Err(TestCaseError::fail("decided"));
            };
            let cause = decision.cause();
            prop_assert_eq!(cause.block.entry, entry);
            prop_assert_eq!(&*cause.block.pattern, pattern);
            prop_assert_eq!(cause.statement, None);
            prop_assert_eq!(cause.step, Step::Allow);
        }
    }
}

/// Every statement a block with two budgets can be decided by.
fn every_statement() -> Vec<Statement> {
    let mut block = open_block();
    block.budgets = vec![
        budget(
            BudgetMetric::Requests,
            1,
            Window::Calendar(CalendarUnit::Day),
        ),
        budget(BudgetMetric::Tokens, 1, Window::RollingMs(1000)),
    ];
    Statement::of_block(&block)
}

/// The names decisions are stored under (schema 4, `docs/spec/store.md`)
/// are durable data: frozen here, in evaluation order. They are the
/// policy's keywords.
#[test]
fn stored_statement_names_are_frozen() {
    let names: Vec<String> = every_statement()
        .into_iter()
        .map(|s| s.stored_name().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "sampling",
            "tools",
            "max_messages",
            "max_input",
            "max_context",
            "max_tokens",
            "models",
            "rate",
            "budget:0",
            "budget:1",
            "deadline",
            "consent"
        ]
    );
    for statement in every_statement() {
        assert!(statement.stored_name().starts_with(statement.name()));
    }
}

/// `Statement::step` (what `mcpc eval --explain` reads to place a
/// statement among the steps) is the step this test's model, and so every
/// fresh cause above, gives each statement; and evaluation order follows
/// the steps.
#[test]
fn statement_steps_are_the_steps_causes_name() {
    let all = every_statement();
    for statement in &all {
        assert_eq!(statement.step(), step_of(*statement), "{statement:?}");
    }
    let mut steps: Vec<Step> = all.iter().map(|s| s.step()).collect();
    steps.dedup();
    assert!(steps.windows(2).all(|w| w[0] != w[1]), "{all:?}");
}

/// The name a stored decision records (schema 4) reads back as the same
/// statement; anything else reads as unknown, never as another statement.
#[test]
fn stored_statement_names_round_trip() {
    let mut all = every_statement();
    all.push(Statement::Budget(usize::MAX));
    for statement in all {
        let name = statement.stored_name();
        assert_eq!(
            Statement::from_stored_name(&name),
            Some(statement),
            "{name}"
        );
    }
    for garbage in [
        "",
        "budget",
        "budget:",
        "budget:-1",
        "budget:+1",
        "budget: 1",
        "budget:1x",
        "budget:99999999999999999999999",
        "Rate",
        "consent ",
        "retry",
    ] {
        assert_eq!(Statement::from_stored_name(garbage), None, "{garbage:?}");
    }
}
