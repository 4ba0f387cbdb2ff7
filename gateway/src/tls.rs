//! TLS, all of it rustls on ring: the roots upstream certificates are
//! verified against (the system's, and any private CA the operator names),
//! and the optional TLS listener (`gateway/README.md`, "TLS").

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::GatewayError;

/// A certificate chain and its key, in PEM files: the gateway listens on
/// TLS with them.
#[derive(Debug, Clone)]
pub struct ListenTls {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The leaf's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// ring, as the upstream connector's (aws-lc-rs needs cmake to build).
#[allow(
    deprecated,
    reason = "rustls deprecates ring's provider for lacking post-quantum key exchange; aws-lc-rs, which has it, needs cmake"
)]
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(what: impl std::fmt::Display) -> GatewayError {
    GatewayError::Tls(what.to_string())
}

/// The certificates of a PEM file; an error when it holds none.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, GatewayError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            tls_error(format_args!(
                "cannot read certificates from {}: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(tls_error(format_args!(
            "{} holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
            path.display()
        )));
    }
    Ok(certs)
}

/// The upstream client's TLS: the system's roots, and every certificate
/// in the `private_cas` PEM files as a root too.
pub(crate) fn client_config(private_cas: &[PathBuf]) -> Result<ClientConfig, GatewayError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (_, unreadable) = roots.add_parsable_certificates(native.certs);
    for path in private_cas {
        for cert in certificates(path)? {
            roots.add(cert).map_err(|e| {
                tls_error(format_args!(
                    "{}: not a usable CA certificate: {e}",
                    path.display()
                ))
            })?;
        }
    }
    if roots.is_empty() {
        return Err(GatewayError::Runtime(format!(
            "no TLS roots: the system's could not be read ({} unreadable, errors: {:?}) and no --upstream-ca was given",
            unreadable, native.errors
        )));
    }
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The listener's TLS: `tls`'s chain and key, HTTP/1.1 by ALPN.
pub(crate) fn acceptor(tls: &ListenTls) -> Result<TlsAcceptor, GatewayError> {
    let chain = certificates(&tls.cert)?;
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| {
        tls_error(format_args!(
            "cannot read a private key from {}: {e}",
            tls.key.display()
        ))
    })?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            tls_error(format_args!(
                "{} and {} do not make a certificate and its key: {e}",
                tls.cert.display(),
                tls.key.display()
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
