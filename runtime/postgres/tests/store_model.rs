//! The runtime's model-based store properties (`runtime/tests/store_shared/
//! model.rs`, unchanged) against PostgreSQL, beside the in-memory store:
//! every answer must equal the model's and the memory store's, including
//! each refusal's `available_at` and the clock-step refusals.

#[path = "../../tests/store_shared/model.rs"]
mod model;
mod support;

use mcpolicy_runtime::store::{MemoryStore, StoreAdmin};
use model::BOUND;
use proptest::prelude::*;

/// The memory store and a fresh PostgreSQL schema, with the model's bound.
fn stores(_dir: &tempfile::TempDir) -> Vec<(&'static str, Box<dyn StoreAdmin>)> {
    let spec = support::spec().expect("checked by the test");
    vec![
        (
            "memory",
            Box::new(MemoryStore::with_max_decisions_per_server(BOUND)),
        ),
        (
            "postgres",
            Box::new(support::fresh_store(&spec, "model", BOUND)),
        ),
    ]
}

proptest! {
    #![proptest_config(model::config(32))]
    #[test]
    fn stores_agree_with_the_model(ops in proptest::collection::vec(model::op(), 1..120)) {
        if support::spec().is_some() {
            model::run(ops, stores);
        }
    }

    #[test]
    fn eviction_keeps_the_bound_and_its_order(
        flood in proptest::collection::vec((0u8..24, any::<bool>(), proptest::option::of(0u16..100)), 1..80)
    ) {
        if support::spec().is_some() {
            model::run_flood(flood, stores);
        }
    }

    #[test]
    fn clock_steps_never_admit_more_than_an_unpruned_store(
        ops in proptest::collection::vec(model::step_op(), 1..150)
    ) {
        if support::spec().is_some() {
            model::run_steps(ops, stores);
        }
    }
}
