//! The runtime's decision store contract (`runtime/tests/store_shared/
//! contract.rs`, unchanged: replay, expiry, windows, settlement, eviction,
//! clock steps, and the contention tests of eight threads admitting and
//! four replaying at once) against PostgreSQL, each test in a schema of its
//! own so that they run in parallel.

#[macro_use]
#[path = "../../tests/store_shared/contract.rs"]
mod contract;
mod support;

use contract::*;

fn postgres() -> Option<Fixture> {
    let spec = support::spec()?;
    Some(Fixture {
        store: Arc::new(support::fresh_store(&spec, "contract", TEST_BOUND)),
        max_per_server: TEST_BOUND,
        _dir: None,
    })
}

/// Instantiates a contract test for PostgreSQL.
macro_rules! on_postgres {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            if let Some(fixture) = postgres() {
                contract::$name(fixture);
            }
        }
    )*};
}

each_contract_test!(on_postgres);
