//! The PostgreSQL database of the tests that need one
//! (`store_postgres.rs`, `gateway_fleet.rs`): `MCPOLICY_TEST_POSTGRES` (a
//! libpq string, as `runtime/postgres/scripts/pg-test-cluster.sh start DIR`
//! prints it), a schema of its own per call. Without it a test passes
//! over itself with a note, except under `MCPOLICY_REQUIRE_POSTGRES=1`
//! (CI), where it fails.

use std::sync::atomic::{AtomicU64, Ordering};

/// The test database plus a fresh `schema=`, or None (the test returns).
pub fn store_spec(prefix: &str) -> Option<String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let spec = match std::env::var("MCPOLICY_TEST_POSTGRES") {
        Ok(spec) if !spec.trim().is_empty() => spec,
        _ => {
            assert!(
                std::env::var("MCPOLICY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "MCPOLICY_REQUIRE_POSTGRES=1 but MCPOLICY_TEST_POSTGRES is not set"
            );
            eprintln!("note: MCPOLICY_TEST_POSTGRES is not set; PostgreSQL test not run");
            return None;
        }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    Some(format!(
        "{spec} schema=t_cli_{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}
