//! TLS to PostgreSQL with libpq's meaning of `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey` (and of `PGSSLMODE`, `PGSSLROOTCERT`,
//! `PGSSLCERT`, `PGSSLKEY`), through OpenSSL, the library libpq itself
//! verifies with:
//!
//! | `sslmode` | TLS | certificate chain | host name |
//! |---|---|---|---|
//! | `disable` | never | | |
//! | `allow` | only if the server refuses plain text | checked if a root certificate is given | no |
//! | `prefer` (default) | if the server offers it | checked if a root certificate is given | no |
//! | `require` | always | checked if a root certificate is given | no |
//! | `verify-ca` | always | always (`sslrootcert`) | no |
//! | `verify-full` | always | always (`sslrootcert`) | yes |
//!
//! The root certificates are `sslrootcert=PATH` (PEM, one or more), else
//! `~/.postgresql/root.crt` when it exists; `sslrootcert=system` trusts the
//! system's certificate store and, as in libpq 16, makes `verify-full` the
//! default and the only mode allowed. Over a Unix socket PostgreSQL never
//! speaks TLS and libpq ignores `sslmode`; so does this store.
//!
//! One difference from libpq, on purpose: under `prefer` a TLS handshake
//! that fails (a certificate that fails verification against a given root)
//! is an error, never a retry in plain text.

use std::path::{Path, PathBuf};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain text only.
    Disable,
    /// Plain text; TLS only when the server refuses a plain connection.
    Allow,
    /// TLS when the server offers it, else plain text (libpq's default).
    Prefer,
    /// TLS or fail; the certificate is checked only against a given root.
    Require,
    /// TLS with the server's certificate chain checked against the root
    /// certificates; the host name is not checked.
    VerifyCa,
    /// TLS with the chain checked and the certificate naming the host.
    VerifyFull,
}

impl SslMode {
    /// The mode a `sslmode=` value names, `None` for an unknown one.
    pub fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The `sslmode=` value.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of one or more certificates (`sslrootcert=PATH`, or the
    /// default `~/.postgresql/root.crt`).
    File(PathBuf),
    /// The system's certificate store (`sslrootcert=system`).
    System,
}

/// The TLS part of a store's connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSpec {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`, or the default file when it exists; `None`: no root
    /// certificate, so the server's certificate is not checked (never
    /// under `verify-ca` / `verify-full`, which refuse to connect without).
    pub root_cert: Option<RootCert>,
    /// `sslcert`: the client certificate (PEM) presented to the server.
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: its private key (PEM, PKCS #8, unencrypted).
    pub client_key: Option<PathBuf>,
}

impl Default for TlsSpec {
    fn default() -> Self {
        TlsSpec {
            mode: SslMode::Prefer,
            root_cert: None,
            client_cert: None,
            client_key: None,
        }
    }
}

/// The `ssl…` values taken out of a connection string, before defaults.
#[derive(Debug, Default)]
pub(crate) struct TlsParams {
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    pub sslcert: Option<String>,
    pub sslkey: Option<String>,
}

impl TlsParams {
    /// Takes `key=value` if it is a TLS parameter this store reads: `Ok(true)`
    /// taken, `Ok(false)` not a TLS parameter (the client reads it), `Err`
    /// a TLS parameter this store does not support (never ignored).
    pub fn take(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            // Read by the client itself (`postgres` or `direct`).
            "sslnegotiation" => return Ok(false),
            _ if key.starts_with("ssl") || key == "requiressl" => {
                return Err(key.to_owned());
            }
            _ => return Ok(false),
        };
        *slot = Some(value.to_owned());
        Ok(true)
    }
}

/// Why the TLS parameters cannot be used.
pub(crate) fn resolve(params: TlsParams, unix_only: bool) -> Result<TlsSpec, String> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let sslmode = params.sslmode.or_else(|| env("PGSSLMODE"));
    let rootcert = params.sslrootcert.or_else(|| env("PGSSLROOTCERT"));
    let client_cert = params.sslcert.or_else(|| env("PGSSLCERT"));
    let client_key = params.sslkey.or_else(|| env("PGSSLKEY"));
    let explicit = match &sslmode {
        Some(value) => Some(SslMode::parse(value).ok_or_else(|| {
            format!(
                "sslmode={value} is not a mode; use disable, allow, prefer, require, verify-ca \
                 or verify-full"
            )
        })?),
        None => None,
    };
    let root_cert = match rootcert.as_deref() {
        Some("system") => Some(RootCert::System),
        Some(path) => Some(RootCert::File(PathBuf::from(path))),
        None => default_root_cert().map(RootCert::File),
    };
    let mode = match (explicit, &root_cert) {
        (None, Some(RootCert::System)) => SslMode::VerifyFull,
        (Some(mode), Some(RootCert::System)) if mode != SslMode::VerifyFull => {
            return Err(format!(
                "sslmode={} may not be used with sslrootcert=system (use verify-full)",
                mode.as_str()
            ));
        }
        (mode, _) => mode.unwrap_or(SslMode::Prefer),
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
        return Err(format!(
            "sslmode={} needs the root certificates to check the server's against: give \
             sslrootcert=PATH (a PEM file) or put them in ~/.postgresql/root.crt",
            mode.as_str()
        ));
    }
    if client_cert.is_some() != client_key.is_some() {
        return Err(
            "sslcert and sslkey go together: give both the client certificate and its key"
                .to_owned(),
        );
    }
    Ok(TlsSpec {
        // PostgreSQL never speaks TLS over a Unix socket; libpq ignores sslmode there.
        mode: if unix_only { SslMode::Disable } else { mode },
        root_cert,
        client_cert: client_cert.map(PathBuf::from),
        client_key: client_key.map(PathBuf::from),
    })
}

/// `~/.postgresql/root.crt` when it exists, as libpq reads it.
fn default_root_cert() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("HOME")?)
        .join(".postgresql")
        .join("root.crt");
    path.is_file().then_some(path)
}

/// The connector for `spec`: `None` for plain text only.
pub(crate) fn connector(
    spec: &TlsSpec,
) -> Result<Option<postgres_native_tls::MakeTlsConnector>, String> {
    if spec.mode == SslMode::Disable {
        return Ok(None);
    }
    let mut builder = native_tls::TlsConnector::builder();
    match &spec.root_cert {
        Some(RootCert::File(path)) => {
            let pem = read(path, "sslrootcert")?;
            let certs = native_tls::Certificate::stack_from_pem(&pem).map_err(|e| {
                format!(
                    "sslrootcert={}: not a PEM file of certificates: {e}",
                    path.display()
                )
            })?;
            if certs.is_empty() {
                return Err(format!(
                    "sslrootcert={}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                ));
            }
            builder.disable_built_in_roots(true);
            for cert in certs {
                builder.add_root_certificate(cert);
            }
        }
        Some(RootCert::System) => {}
        // No root to check against: any certificate, as libpq without one.
        None => {
            builder.danger_accept_invalid_certs(true);
        }
    }
    if spec.mode != SslMode::VerifyFull {
        builder.danger_accept_invalid_hostnames(true);
    }
    if let (Some(cert), Some(key)) = (&spec.client_cert, &spec.client_key) {
        let cert_pem = read(cert, "sslcert")?;
        let key_pem = read(key, "sslkey")?;
        if !key_pem.starts_with(b"-----BEGIN PRIVATE KEY-----") {
            return Err(format!(
                "sslkey={}: not an unencrypted PKCS #8 PEM key (-----BEGIN PRIVATE KEY-----); \
                 convert it with `openssl pkcs8 -topk8 -nocrypt -in KEY`",
                key.display()
            ));
        }
        let identity = native_tls::Identity::from_pkcs8(&cert_pem, &key_pem).map_err(|e| {
            format!(
                "sslcert={} with sslkey={}: not a PEM certificate and its key: {e}",
                cert.display(),
                key.display()
            )
        })?;
        builder.identity(identity);
    }
    let connector = builder
        .build()
        .map_err(|e| format!("sslmode={}: cannot set up TLS: {e}", spec.mode.as_str()))?;
    Ok(Some(postgres_native_tls::MakeTlsConnector::new(connector)))
}

fn read(path: &Path, parameter: &str) -> Result<Vec<u8>, String> {
    crate::config::read_small(path)
        .map(String::into_bytes)
        .map_err(|e| format!("{parameter}={}: cannot read: {e}", path.display()))
}

/// `sslmode=… sslrootcert=…`, for the message of a failed handshake.
pub(crate) fn describe(spec: &TlsSpec) -> String {
    let mut text = format!("sslmode={}", spec.mode.as_str());
    match &spec.root_cert {
        Some(RootCert::File(path)) => text.push_str(&format!(" sslrootcert={}", path.display())),
        Some(RootCert::System) => text.push_str(" sslrootcert=system"),
        None => {}
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: Option<&str>, root: Option<&str>) -> TlsParams {
        TlsParams {
            sslmode: mode.map(str::to_owned),
            sslrootcert: root.map(str::to_owned),
            ..TlsParams::default()
        }
    }

    #[test]
    fn every_libpq_mode_parses_and_others_are_refused_by_name() {
        for mode in [
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            assert_eq!(SslMode::parse(mode).map(SslMode::as_str), Some(mode));
        }
        let error = resolve(params(Some("verify"), None), false).expect_err("refused");
        assert!(error.starts_with("sslmode=verify is not a mode"), "{error}");
    }

    #[test]
    fn verifying_modes_need_a_root_and_system_roots_mean_verify_full() {
        let error = resolve(params(Some("verify-full"), None), false);
        // Unless this machine's HOME has ~/.postgresql/root.crt.
        if default_root_cert().is_none() {
            assert!(error.expect_err("refused").contains("sslrootcert=PATH"));
        }
        let spec = resolve(params(None, Some("system")), false).expect("system");
        assert_eq!(spec.mode, SslMode::VerifyFull);
        let error = resolve(params(Some("require"), Some("system")), false).expect_err("weak");
        assert!(error.contains("sslrootcert=system"), "{error}");
        let spec = resolve(params(Some("verify-full"), Some("/ca.pem")), true).expect("unix");
        assert_eq!(spec.mode, SslMode::Disable);
    }

    #[test]
    fn unsupported_tls_parameters_are_refused_not_ignored() {
        let mut taken = TlsParams::default();
        assert_eq!(taken.take("sslcrl", "/x"), Err("sslcrl".to_owned()));
        assert_eq!(
            taken.take("sslpassword", "x"),
            Err("sslpassword".to_owned())
        );
        assert_eq!(taken.take("sslnegotiation", "direct"), Ok(false));
        assert_eq!(taken.take("sslmode", "require"), Ok(true));
        let only_cert = TlsParams {
            sslcert: Some("/c.pem".to_owned()),
            ..TlsParams::default()
        };
        let error = resolve(only_cert, false).expect_err("no key");
        assert!(error.contains("sslkey"), "{error}");
    }

    #[test]
    fn unreadable_or_invalid_root_certificates_name_the_parameter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").expect("write");
        for path in [&missing, &garbage] {
            let spec = TlsSpec {
                mode: SslMode::VerifyFull,
                root_cert: Some(RootCert::File(path.clone())),
                ..TlsSpec::default()
            };
            let error = connector(&spec).err().expect("refused");
            assert!(
                error.starts_with(&format!("sslrootcert={}:", path.display())),
                "{error}"
            );
        }
    }
}
