//! The PostgreSQL the tests run against: `MCPOLICY_TEST_POSTGRES` (a
//! connection string, as `scripts/pg-test-cluster.sh start DIR` prints it).
//! Without it the tests pass over themselves with a note, unless
//! `MCPOLICY_REQUIRE_POSTGRES=1` (CI), where they fail.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::sync::atomic::{AtomicU64, Ordering};

use mcpolicy_store_postgres::{PostgresOptions, PostgresStore};

/// The test database's connection string, or None (the test returns early)
/// when none is configured and CI does not require one.
pub fn spec() -> Option<String> {
    match std::env::var("MCPOLICY_TEST_POSTGRES") {
        Ok(spec) if !spec.trim().is_empty() => Some(spec),
        _ => {
            assert!(
                std::env::var("MCPOLICY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "MCPOLICY_REQUIRE_POSTGRES=1 but MCPOLICY_TEST_POSTGRES is not set: start a \
                 cluster with runtime/postgres/scripts/pg-test-cluster.sh"
            );
            eprintln!("note: MCPOLICY_TEST_POSTGRES is not set; PostgreSQL test not run");
            None
        }
    }
}

/// A schema name no other test (thread or process) uses.
pub fn fresh_schema(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "t_{prefix}_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new, empty store in a schema of its own.
pub fn fresh_store(spec: &str, prefix: &str, max_per_server: u64) -> PostgresStore {
    let options = PostgresOptions {
        schema: fresh_schema(prefix),
        pool_size: 8,
        max_decisions_per_server: max_per_server,
        // Fixed instants of 2026-03: not the database's clock.
        max_clock_skew: None,
        ..PostgresOptions::default()
    };
    PostgresStore::open_with(spec, &options).expect("open a PostgreSQL store")
}

/// The TLS test clusters (`scripts/pg-test-cluster.sh start-tls DIR`).
#[derive(Debug, Clone)]
pub struct TlsClusters {
    /// `MCPOLICY_TEST_POSTGRES_TLS`: a server with `ssl = on` that accepts
    /// TCP in TLS only, as `host=localhost port=…`.
    pub tls: String,
    /// `MCPOLICY_TEST_POSTGRES_TLS_CERTS`: `ca.crt`, `other-ca.crt`,
    /// `client.crt`, `client.key`.
    pub certs: std::path::PathBuf,
    /// `MCPOLICY_TEST_POSTGRES_TCP`: a server without TLS on 127.0.0.1.
    pub tcp: String,
}

impl TlsClusters {
    /// A certificate or key file of the test CA's directory.
    pub fn cert(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }
}

/// The TLS test clusters, or None (the test returns early) when they are not
/// configured and CI does not require them.
pub fn tls_clusters() -> Option<TlsClusters> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match (
        var("MCPOLICY_TEST_POSTGRES_TLS"),
        var("MCPOLICY_TEST_POSTGRES_TLS_CERTS"),
        var("MCPOLICY_TEST_POSTGRES_TCP"),
    ) {
        (Some(tls), Some(certs), Some(tcp)) => Some(TlsClusters {
            tls,
            certs: certs.into(),
            tcp,
        }),
        _ => {
            assert!(
                std::env::var("MCPOLICY_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "MCPOLICY_REQUIRE_POSTGRES=1 but MCPOLICY_TEST_POSTGRES_TLS, \
                 MCPOLICY_TEST_POSTGRES_TLS_CERTS or MCPOLICY_TEST_POSTGRES_TCP is not set: \
                 start the clusters with runtime/postgres/scripts/pg-test-cluster.sh start-tls"
            );
            eprintln!("note: MCPOLICY_TEST_POSTGRES_TLS is not set; PostgreSQL TLS test not run");
            None
        }
    }
}

/// A cluster of this test's own (it is stopped and started), removed at the end.
pub struct OwnCluster {
    dir: tempfile::TempDir,
    script: std::path::PathBuf,
}

impl OwnCluster {
    pub fn start(prefix: &str) -> OwnCluster {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("tempdir");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-test-cluster.sh");
        let cluster = OwnCluster { dir, script };
        cluster.ctl("start");
        cluster
    }

    pub fn ctl(&self, action: &str) {
        let output = std::process::Command::new("bash")
            .arg(&self.script)
            .arg(action)
            .arg(self.dir.path())
            .output()
            .expect("run pg-test-cluster.sh");
        assert!(
            output.status.success(),
            "pg-test-cluster.sh {action}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn spec(&self) -> String {
        format!(
            "host={} port=5432 user=postgres dbname=postgres",
            self.dir.path().display()
        )
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        // A cluster a test stopped with SIGSTOP must run to shut down.
        if self.dir.path().join("data/postmaster.pid").exists() {
            for pid in self.pids() {
                let _ = std::process::Command::new("kill")
                    .arg("-CONT")
                    .arg(pid.to_string())
                    .status();
            }
        }
        let _ = std::process::Command::new("bash")
            .arg(&self.script)
            .arg("kill")
            .arg(self.dir.path())
            .output();
    }
}

impl OwnCluster {
    /// The cluster's directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Every process of the cluster: the postmaster (`data/postmaster.pid`)
    /// and its children.
    pub fn pids(&self) -> Vec<u32> {
        let text = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
            .unwrap_or_default();
        let Some(postmaster) = text
            .lines()
            .next()
            .and_then(|line| line.trim().parse::<u32>().ok())
        else {
            return Vec::new();
        };
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`: the fields after the last `)`.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Sends `signal` (`STOP`, `CONT`) to every process of the cluster.
    pub fn signal(&self, signal: &str) {
        for pid in self.pids() {
            let status = std::process::Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .status()
                .expect("kill");
            assert!(status.success(), "kill -{signal} {pid}");
        }
    }
}
