//! The PostgreSQL database of the tests that need one
//! (`store_postgres.rs`, `gateway_fleet.rs`): `MCPOLICY_TEST_POSTGRES` (a
//! libpq string, as `runtime/postgres/scripts/pg-test-cluster.sh start DIR`
//! prints it; `store_postgres.rs` also asks `configured` for the TLS cluster's
//! variables), a schema of its own per call (`fresh_schema`). Without it a test passes
//! over itself with a note, except under `MCPOLICY_REQUIRE_POSTGRES=1`
//! (CI), where it fails.

use std::sync::atomic::{AtomicU64, Ordering};

/// The test database plus a fresh `schema=`, or None (the test returns).
pub fn store_spec(prefix: &str) -> Option<String> {
    let [spec] = configured(["MCPOLICY_TEST_POSTGRES"], "PostgreSQL test")?;
    Some(fresh_schema(&spec, prefix))
}

/// The values of `vars`, each set and not blank; else None (the test
/// returns with a note naming `what` was not run), and a failure under
/// `MCPOLICY_REQUIRE_POSTGRES=1`.
pub fn configured<const N: usize>(vars: [&str; N], what: &str) -> Option<[String; N]> {
    let values = vars.map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()));
    if values.iter().all(Option::is_some) {
        return Some(values.map(Option::unwrap_or_default));
    }
    let unset: Vec<&str> = vars
        .iter()
        .zip(&values)
        .filter(|(_, value)| value.is_none())
        .map(|(name, _)| *name)
        .collect();
    let names = unset.join(" and ");
    assert!(
        std::env::var("MCPOLICY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
        "MCPOLICY_REQUIRE_POSTGRES=1 but {names} is not set"
    );
    eprintln!("note: {names} is not set; {what} not run");
    None
}

/// `spec` with a schema of its own: `schema=t_cli_{prefix}_…`, unique to
/// this process, this call and the moment.
pub fn fresh_schema(spec: &str, prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{spec} schema=t_cli_{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
