//! The statements of `defaults` and `server` blocks, declared once for the
//! runtime and the compiler (`docs/spec/language.md`, "Statements").
//!
//! [`for_each_statement!`](crate::for_each_statement) holds one entry per
//! statement: what the runtime needs of it. Each consumer passes it a macro
//! of its own that reads the entries and generates what it needs:
//!
//! - `table.rs`: [`EffectiveBlock`](crate::table::EffectiveBlock), one field
//!   per statement (`field:`, in declaration order, which is the table's
//!   member order), its built-in and applied defaults, and each statement's
//!   built-in reason ([`builtin::own_reason`](crate::table::builtin::own_reason));
//! - `engine/mod.rs`: [`engine::Statement`](crate::engine::Statement), the
//!   statements that decide (`decides`), with their keyword, stored name,
//!   step and evaluation order;
//! - the compiler's `statements.rs`: its `Statement`, `PartialBlock`, merge
//!   and effective lines, with syntax and documentation on top, by an
//!   exhaustive match on the statement, so a statement declared here and not
//!   there fails to compile.
//!
//! An entry says:
//! - `keyword`: the policy keyword, also the name a decision is stored under
//!   (`docs/spec/store.md`); an entry with `(usize)` is repeatable and stored
//!   as `keyword:index`;
//! - `field`: the `EffectiveBlock` field, its type and its built-in default
//!   (what a statement nobody writes means); `applied`: what the runtime
//!   applies instead when the table leaves the field unset (for display);
//! - `reason`: the built-in reason its denial carries (`None`: it does not
//!   deny, or not with a reason of its own);
//! - `step`, `order`: the evaluation step at which it decides and its place
//!   in evaluation order (`docs/spec/evaluation.md`, "Order").
//!
//! The entries in `alerts` decide nothing (no step, no cause).

/// Calls `$callback! { decides { … } alerts { … } }` with every statement's
/// entry (see the module documentation of `statements.rs`).
#[macro_export]
#[doc(hidden)]
macro_rules! for_each_statement {
    ($callback:ident) => {
        $callback! {
            decides {
                /// `sampling on|off`.
                Sampling {
                    keyword: "sampling",
                    field: sampling: $crate::table::Switch = $crate::table::Switch {
                        enabled: true,
                        reason: $crate::table::builtin::SAMPLING_DISABLED.to_owned(),
                    },
                    reason: Some($crate::table::builtin::SAMPLING_DISABLED),
                    step: Switches,
                    order: 1,
                }
                /// `tools on|off`: whether a request may carry `tools`/`toolChoice`.
                Tools {
                    keyword: "tools",
                    field: tools: $crate::table::Switch = $crate::table::Switch {
                        enabled: true,
                        reason: $crate::table::builtin::TOOLS_DISABLED.to_owned(),
                    },
                    reason: Some($crate::table::builtin::TOOLS_DISABLED),
                    step: Switches,
                    order: 2,
                }
                /// The widest `includeContext`; wider requests are trimmed.
                MaxContext {
                    keyword: "max_context",
                    field: max_context: $crate::table::ContextScope =
                        $crate::table::ContextScope::AllServers,
                    reason: None,
                    step: Trims,
                    order: 5,
                }
                /// Canonical bytes of `systemPrompt` + `messages`.
                MaxInput {
                    keyword: "max_input",
                    field: max_input: Option<$crate::table::Limit> = None,
                    reason: Some($crate::table::builtin::INPUT_TOO_LARGE),
                    step: InputLimits,
                    order: 4,
                }
                /// Number of entries in `messages`.
                MaxMessages {
                    keyword: "max_messages",
                    field: max_messages: Option<$crate::table::Limit> = None,
                    reason: Some($crate::table::builtin::INPUT_TOO_LARGE),
                    step: InputLimits,
                    order: 3,
                }
                /// Larger `maxTokens` is clamped (a trim).
                MaxTokens {
                    keyword: "max_tokens",
                    field: max_tokens: Option<u64> = None,
                    reason: None,
                    step: Trims,
                    order: 6,
                }
                /// Rolling request rate.
                Rate {
                    keyword: "rate",
                    field: rate: Option<$crate::table::Rate> = None,
                    reason: Some($crate::table::builtin::RATE_LIMIT),
                    step: Rate,
                    order: 8,
                }
                /// Budgets, in source order.
                Budget(usize) {
                    keyword: "budget",
                    field: budgets: Vec<$crate::table::Budget> = Vec::new(),
                    reason: Some($crate::table::builtin::BUDGET_EXHAUSTED),
                    step: Budgets,
                    order: 9,
                }
                /// The deadline the client must enforce.
                Deadline {
                    keyword: "deadline",
                    field: deadline: Option<$crate::table::Deadline> = None,
                    reason: Some($crate::table::builtin::DEADLINE),
                    step: Allow,
                    order: 10,
                }
                /// When the user is asked.
                Consent {
                    keyword: "consent",
                    // MCP asks clients to keep a human in the loop for sampling.
                    field: consent: $crate::table::Consent = $crate::table::Consent::First,
                    reason: None,
                    step: Consent,
                    order: 11,
                }
                /// Model-name globs the request may run on; `None` allows any.
                Models {
                    keyword: "models",
                    field: models: Option<Vec<String>> = None,
                    reason: None,
                    step: Trims,
                    order: 7,
                }
            }
            alerts {
                /// When re-presentations become a retry-loop alert; `None` is the
                /// built-in 40 per 10 minutes. Absent from the table when `None`, so
                /// that tables of policies without it keep their bytes.
                RetryAlert {
                    keyword: "retry_alert",
                    #[serde(default, skip_serializing_if = "Option::is_none")]
                    // The engine applies `alert::DEFAULT_SETTING` to `None`.
                    field: retry_alert: Option<$crate::table::RetryAlert> = None,
                    applied: Some($crate::alert::DEFAULT_SETTING),
                    reason: None,
                }
            }
        }
    };
}
