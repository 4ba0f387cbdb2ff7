//! TLS to a real PostgreSQL with `ssl = on` (`scripts/pg-test-cluster.sh
//! start-tls DIR`: a throwaway CA, a server certificate for `localhost`
//! only, TCP in TLS only), with libpq's meaning of `sslmode`:
//!
//! - `verify-full` with the CA connects, admits, and PostgreSQL's
//!   `pg_stat_ssl` says the store's session is encrypted; with another CA
//!   (same name, other key) it fails verification, naming the parameters;
//! - `verify-full` to `127.0.0.1` (not in the certificate) fails on the host
//!   name, while `verify-ca` there connects;
//! - `require` connects without a root certificate, and checks the chain
//!   when one is given; to a server without TLS it fails, never falling back
//!   to plain text;
//! - `disable` is refused by a `hostssl`-only server; `prefer` and `allow`
//!   use TLS against it and plain text against a server without TLS;
//! - a client certificate (`sslcert`/`sslkey`) logs in a role whose only
//!   way in is `cert`;
//! - a bad `sslmode` or an unreadable `sslrootcert` is a `StoreError` naming
//!   the parameter; over a Unix socket `sslmode` is ignored, as libpq does.

mod support;

use mcpolicy_runtime::store::{Admission, DecisionStore, LimitCheck, LimitWindow, StoreError};
use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};
use support::TlsClusters;

fn open(spec: &str) -> Result<PostgresStore, StoreError> {
    let options = PostgresOptions {
        schema: support::fresh_schema("tls"),
        pool_size: 2,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    };
    PostgresStore::open_with(spec, &options)
}

/// Opens `spec`, admits one request under a limit of one and refuses the
/// next, and returns the session's TLS version (`None`: plain text) as
/// PostgreSQL reports it.
fn admits(spec: &str) -> Option<String> {
    let store = open(spec).unwrap_or_else(|e| panic!("open {spec}: {e}"));
    let check = LimitCheck {
        counter: "rate:tls".into(),
        amount: 1,
        limit: 1,
        window: LimitWindow::Rolling { ms: 60_000 },
    };
    let now = 1_000_000;
    let first = store.admit("s", std::slice::from_ref(&check), now);
    assert!(matches!(first, Ok(Admission::Admitted { .. })), "{first:?}");
    let second = store.admit("s", &[check], now);
    assert!(
        matches!(second, Ok(Admission::Refused { .. })),
        "{second:?}"
    );
    store.session_tls().expect("pg_stat_ssl")
}

/// The error opening `spec` gives, as its message.
fn refused(spec: &str) -> (StoreError, String) {
    let error = open(spec).expect_err(spec);
    let message = error.to_string();
    (error, message)
}

/// `MCPOLICY_TEST_POSTGRES_TLS` with its host replaced by `127.0.0.1`.
fn by_address(c: &TlsClusters) -> String {
    c.tls.replace("host=localhost", "host=127.0.0.1")
}

#[test]
fn verify_full_with_the_ca_connects_admits_and_is_encrypted() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    let spec = format!(
        "{} sslmode=verify-full sslrootcert={}",
        c.tls,
        c.cert("ca.crt")
    );
    let version = admits(&spec).expect("pg_stat_ssl says ssl = t");
    assert!(version.starts_with("TLSv1."), "{version}");
    // The URL form reads the same parameters.
    let port = c
        .tls
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .expect("port");
    let url = format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={}",
        c.cert("ca.crt")
    );
    assert!(admits(&url).is_some());
}

#[test]
fn verify_full_with_another_ca_fails_verification_naming_the_parameters() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    let other = c.cert("other-ca.crt");
    let (error, message) = refused(&format!(
        "{} sslmode=verify-full sslrootcert={other}",
        c.tls
    ));
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(
        message.contains(&format!(
            "sslmode=verify-full sslrootcert={other}: the server's certificate does not verify"
        )),
        "{message}"
    );
    assert!(message.contains("certificate verify failed"), "{message}");
}

#[test]
fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    let ca = c.cert("ca.crt");
    let (_, message) = refused(&format!(
        "{} sslmode=verify-full sslrootcert={ca}",
        by_address(&c)
    ));
    assert!(
        message.contains(&format!(
            "sslmode=verify-full sslrootcert={ca}: the server's certificate does not name the host"
        )),
        "{message}"
    );
    assert!(message.contains("IP address mismatch"), "{message}");
    let tls = admits(&format!(
        "{} sslmode=verify-ca sslrootcert={ca}",
        by_address(&c)
    ));
    assert!(tls.is_some());
    // verify-ca still checks the chain.
    let (_, message) = refused(&format!(
        "{} sslmode=verify-ca sslrootcert={}",
        by_address(&c),
        c.cert("other-ca.crt")
    ));
    assert!(
        message.contains("sslmode=verify-ca sslrootcert=")
            && message.contains("does not verify against the root certificates"),
        "{message}"
    );
}

#[test]
fn require_encrypts_without_a_root_and_checks_the_chain_with_one() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    assert!(admits(&format!("{} sslmode=require", by_address(&c))).is_some());
    let (_, message) = refused(&format!(
        "{} sslmode=require sslrootcert={}",
        c.tls,
        c.cert("other-ca.crt")
    ));
    assert!(
        message.contains("sslmode=require sslrootcert="),
        "{message}"
    );
    assert!(message.contains("certificate verify failed"), "{message}");
}

#[test]
fn require_to_a_server_without_tls_fails_and_never_falls_back() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    for mode in ["require", "verify-full"] {
        let (error, message) = refused(&format!(
            "{} sslmode={mode} sslrootcert={}",
            c.tcp,
            c.cert("ca.crt")
        ));
        assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
        assert!(
            message.contains(&format!("sslmode={mode}")) && message.contains("does not offer TLS"),
            "{message}"
        );
    }
}

#[test]
fn disable_is_refused_by_a_tls_only_server_and_plain_elsewhere() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    let (_, message) = refused(&format!("{} sslmode=disable", c.tls));
    assert!(message.contains("no encryption"), "{message}");
    assert_eq!(admits(&format!("{} sslmode=disable", c.tcp)), None);
}

#[test]
fn prefer_and_allow_use_tls_when_the_server_has_it_and_plain_text_when_not() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    // prefer is the default.
    for mode in ["", " sslmode=prefer", " sslmode=allow"] {
        assert!(admits(&format!("{}{mode}", c.tls)).is_some(), "{mode}");
        assert_eq!(admits(&format!("{}{mode}", c.tcp)), None, "{mode}");
    }
}

#[test]
fn a_client_certificate_logs_in_a_role_that_only_certificates_admit() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    let base = format!(
        "{} user=certuser sslmode=verify-full sslrootcert={}",
        c.tls.replace("user=postgres", ""),
        c.cert("ca.crt")
    );
    let with_cert = format!(
        "{base} sslcert={} sslkey={}",
        c.cert("client.crt"),
        c.cert("client.key")
    );
    assert!(admits(&with_cert).is_some());
    let (_, message) = refused(&base);
    assert!(message.contains("certificate"), "{message}");
}

#[test]
fn bad_tls_parameters_are_store_errors_naming_them() {
    let Some(c) = support::tls_clusters() else {
        return;
    };
    let (_, message) = refused(&format!("{} sslmode=verify", c.tls));
    assert!(
        message.contains("sslmode=verify is not a mode"),
        "{message}"
    );
    let missing = c.cert("missing.crt");
    let (error, message) = refused(&format!(
        "{} sslmode=verify-full sslrootcert={missing}",
        c.tls
    ));
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(
        message.contains(&format!("sslrootcert={missing}: cannot read")),
        "{message}"
    );
    // A key file that is not one.
    let (_, message) = refused(&format!(
        "{} sslmode=require sslcert={} sslkey={}",
        c.tls,
        c.cert("client.crt"),
        c.cert("client.crt")
    ));
    assert!(message.contains("sslkey="), "{message}");
    // The system's roots do not include the throwaway CA.
    let (_, message) = refused(&format!("{} sslrootcert=system", c.tls));
    assert!(
        message.contains("sslmode=verify-full sslrootcert=system"),
        "{message}"
    );
    assert!(message.contains("certificate verify failed"), "{message}");
}

#[test]
fn over_a_unix_socket_sslmode_is_ignored_as_libpq_does() {
    let Some(spec) = support::spec() else {
        return;
    };
    assert_eq!(
        admits(&format!(
            "{spec} sslmode=verify-full sslrootcert=/nonexistent"
        )),
        None
    );
}
