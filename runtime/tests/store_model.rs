//! The model-based store properties (`store_shared/model.rs`) against the
//! in-memory and SQLite stores. The same properties run against PostgreSQL
//! in `runtime/postgres/tests/store_model.rs`.
//!
//! Fast by default; long mode: `PROPTEST_CASES=5000 cargo test -p
//! mcpolicy-runtime --release --test store_model`.

#[path = "store_shared/model.rs"]
mod model;

use mcpolicy_runtime::store::{MemoryStore, StoreAdmin};
use model::BOUND;
use proptest::prelude::*;

/// Both stores, with the model's bound.
fn stores(dir: &tempfile::TempDir) -> Vec<(&'static str, Box<dyn StoreAdmin>)> {
    #[cfg(not(feature = "sqlite"))]
    let _ = dir;
    vec![
        (
            "memory",
            Box::new(MemoryStore::with_max_decisions_per_server(BOUND)),
        ),
        #[cfg(feature = "sqlite")]
        (
            "sqlite",
            Box::new(
                mcpolicy_runtime::store::SqliteStore::open_with(
                    dir.path().join("m.db"),
                    &mcpolicy_runtime::store::SqliteOptions {
                        max_decisions_per_server: BOUND,
                        ..Default::default()
                    },
                )
                .expect("open"),
            ),
        ),
    ]
}

proptest! {
    #![proptest_config(model::config(64))]
    #[test]
    fn stores_agree_with_the_model(ops in proptest::collection::vec(model::op(), 1..120)) {
        model::run(ops, stores);
    }

    /// `docs/spec/store.md`, "Bounds and eviction": floods of decisions of every kind stay within the
    /// bound and are evicted in the documented order.
    #[test]
    fn eviction_keeps_the_bound_and_its_order(
        flood in proptest::collection::vec((0u8..24, any::<bool>(), proptest::option::of(0u16..100)), 1..80)
    ) {
        model::run_flood(flood, stores);
    }

    /// `docs/spec/store.md`, "Pruning and clock steps": arbitrary clock steps, forward and back, small and
    /// large, between admissions and settlements.
    #[test]
    fn clock_steps_never_admit_more_than_an_unpruned_store(
        ops in proptest::collection::vec(model::step_op(), 1..150)
    ) {
        model::run_steps(ops, stores);
    }
}
