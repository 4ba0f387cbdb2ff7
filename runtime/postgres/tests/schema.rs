//! The store's schema: versioned and migrated in place, refused when newer
//! or foreign, and a database that cannot be reached is `Unavailable`.

mod support;

use mcpolicy_runtime::store::{
    Admission, DecisionKey, DecisionStore, LimitCheck, LimitWindow, StoreAdmin, StoreError,
    StoredDecision, Verdict,
};
use mcpolicy_store_postgres::{MIGRATIONS, PostgresOptions, PostgresStore, SCHEMA_VERSION};

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions {
        schema: schema.to_owned(),
        pool_size: 2,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    }
}

/// A raw connection to the test database with `search_path` at `schema`.
fn raw(spec: &str, schema: &str) -> postgres::Client {
    let mut client = postgres::Client::connect(spec, postgres::NoTls).expect("connect");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema}"
        ))
        .expect("schema");
    client
}

#[test]
fn a_version_1_schema_is_migrated_in_place_keeping_its_rows() {
    let Some(spec) = support::spec() else { return };
    let schema = support::fresh_schema("migrate_v1");
    let mut client = raw(&spec, &schema);
    // A store as version 1 left it: a decision and an admission.
    client.batch_execute(MIGRATIONS[0]).expect("version 1");
    client
        .batch_execute(
            "UPDATE schema_version SET version = 1;
             SELECT record('s', 's:1', 'deny', 'user.denied', 'd', NULL, '{\"x\":1}', 5, false, 10);
             SELECT * FROM admit('s', ARRAY['budget'], ARRAY[1::bigint], ARRAY[2::bigint],
                 ARRAY[NULL::bigint], ARRAY[0::bigint], ARRAY[-60000::bigint],
                 ARRAY[1000::bigint], 5);",
        )
        .expect("version 1 rows");
    let store =
        PostgresStore::open_with(&spec, &options(&schema)).expect("migrate to the current version");
    let version: i32 = client
        .query_one("SELECT version FROM schema_version", &[])
        .expect("version")
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    let kept = store
        .get(&DecisionKey::new("s", "s:1"))
        .expect("get")
        .expect("kept");
    assert_eq!(kept.reason.as_ref(), "user.denied");
    assert_eq!(kept.data.as_deref(), Some("{\"x\":1}"));
    assert_eq!(
        kept.statement, None,
        "not known for a row stored before version 2"
    );
    // The budget's spend of version 1 still counts: one more fits, then none.
    let check = [LimitCheck {
        counter: "budget".into(),
        amount: 1,
        limit: 2,
        window: LimitWindow::Fixed {
            start: 0,
            end: 1000,
        },
    }];
    assert!(matches!(
        store.admit("s", &check, 6).expect("admit"),
        Admission::Admitted { .. }
    ));
    assert!(matches!(
        store.admit("s", &check, 7).expect("admit"),
        Admission::Refused { .. }
    ));
    // And version 2's statement is stored from now on.
    let decision = StoredDecision {
        verdict: Verdict::Deny,
        reason: "policy.budget_exhausted".into(),
        digest: "d".into(),
        expires_at: None,
        data: None,
        represented: 0,
        decided_at: 8,
        recomputable: false,
        statement: Some("budget:0".into()),
    };
    store
        .record(&DecisionKey::new("s", "s:2"), &decision)
        .expect("record");
    assert_eq!(
        store.get(&DecisionKey::new("s", "s:2")).expect("get"),
        Some(decision)
    );
}

#[test]
fn a_newer_schema_and_a_foreign_one_are_refused_untouched() {
    let Some(spec) = support::spec() else { return };
    let newer = support::fresh_schema("newer");
    drop(PostgresStore::open_with(&spec, &options(&newer)).expect("create"));
    let mut client = postgres::Client::connect(&spec, postgres::NoTls).expect("connect");
    client
        .batch_execute(&format!(
            "UPDATE {newer}.schema_version SET version = version + 1"
        ))
        .expect("bump");
    match PostgresStore::open_with(&spec, &options(&newer)) {
        Err(StoreError::SchemaTooNew {
            found, supported, ..
        }) => {
            assert_eq!(
                (found, supported),
                (i64::from(SCHEMA_VERSION) + 1, i64::from(SCHEMA_VERSION))
            );
        }
        other => panic!("a newer schema was opened: {other:?}"),
    }
    let foreign = support::fresh_schema("foreign");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {foreign}; CREATE TABLE {foreign}.orders (id int)"
        ))
        .expect("foreign");
    assert!(matches!(
        PostgresStore::open_with(&spec, &options(&foreign)),
        Err(StoreError::ForeignSchema { .. })
    ));
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&foreign],
        )
        .expect("count")
        .get(0);
    assert_eq!(tables, 1, "the foreign schema was touched");
    // An inspection does not create a store where there is none.
    let absent = support::fresh_schema("absent");
    let inspect = PostgresOptions {
        create: false,
        ..options(&absent)
    };
    assert!(matches!(
        PostgresStore::open_with(&spec, &inspect),
        Err(StoreError::Backend { .. })
    ));
}

#[test]
fn an_unreachable_database_is_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A socket directory with no server in it.
    let spec = format!(
        "host={} user=postgres dbname=postgres",
        dir.path().display()
    );
    match PostgresStore::open_with(&spec, &options("mcpolicy")) {
        Err(StoreError::Unavailable { store, detail }) => {
            assert!(store.contains("dbname=postgres"), "{store}");
            assert!(!detail.is_empty());
        }
        other => panic!("expected Unavailable: {other:?}"),
    }
}

#[test]
fn several_policies_share_a_database_in_schemas_of_their_own() {
    let Some(spec) = support::spec() else { return };
    let (a, b) = (
        support::fresh_schema("share_a"),
        support::fresh_schema("share_b"),
    );
    let (a, b) = (
        PostgresStore::open_with(&spec, &options(&a)).expect("a"),
        PostgresStore::open_with(&spec, &options(&b)).expect("b"),
    );
    let check = [LimitCheck {
        counter: "budget".into(),
        amount: 1,
        limit: 1,
        window: LimitWindow::Fixed {
            start: 0,
            end: 1000,
        },
    }];
    assert!(matches!(
        a.admit("s", &check, 1).expect("a"),
        Admission::Admitted { .. }
    ));
    assert!(matches!(
        b.admit("s", &check, 1).expect("b"),
        Admission::Admitted { .. }
    ));
    assert_eq!(a.servers().expect("servers"), ["s"]);
    assert_eq!(b.purge_stale("s", "other", 1).expect("purge"), 0);
}
