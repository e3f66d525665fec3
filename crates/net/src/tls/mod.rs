//! TLS for the page server and its clients, with `rustls` (the `ring` provider; no OpenSSL).
//!
//! A server presents a certificate and key read from PEM files. It may also require client
//! certificates: each certificate authority it names grants the clients it signed an access,
//! read-write or read-only, as tokens do (`crate::auth`). A client names the authority it
//! trusts to have signed the server's certificate, and the name to check the certificate
//! against (the host part of the address unless told otherwise), and may present a
//! certificate of its own.
//!
//! TLS runs under the Lodestore handshake: the frames and the token exchange are the same on
//! an encrypted connection as on a plain one.

pub mod certs;
pub mod transport;

/// Does a frame that begins with these bytes look like a TLS record (a handshake or an
/// alert, TLS 1.0 to 1.3 record versions)? Lets each end say what went wrong when one speaks
/// TLS and the other does not.
pub fn looks_like_tls(magic: &[u8; 4]) -> bool {
    matches!(magic[0], 0x15 | 0x16) && magic[1] == 0x03 && magic[2] <= 0x04
}

use crate::auth::Access;
use lodestore_core::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The crypto provider every Lodestore TLS configuration uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_error(what: &str, path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{what} {}: {reason}", path.display()))
}

/// Every certificate in the PEM file at `path` (at least one).
fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| tls_error(what, path, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_error(what, path, e))?;
    if certs.is_empty() {
        return Err(tls_error(what, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The private key in the PEM file at `path` (PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| tls_error("TLS key file", path, e))
}

/// The authorities in the PEM file at `path`, as a root store.
fn roots(path: &Path) -> Result<Arc<RootCertStore>> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path, "certificate authority file")? {
        store
            .add(cert)
            .map_err(|e| tls_error("certificate authority file", path, e))?;
    }
    Ok(Arc::new(store))
}

fn client_verifier(roots: Arc<RootCertStore>, path: &Path) -> Result<Arc<dyn ClientCertVerifier>> {
    WebPkiClientVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(|e| tls_error("client certificate authority file", path, e))
}

/// A server's TLS: its certificate, and the authorities whose client certificates it requires.
#[derive(Clone)]
pub struct TlsServer {
    config: Arc<ServerConfig>,
    /// Verifies certificates that grant read-write access, when client certificates are
    /// required; one that passes the handshake but not this grants read-only access.
    read_write: Option<Arc<dyn ClientCertVerifier>>,
    requires_client_certificates: bool,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field(
                "requires_client_certificates",
                &self.requires_client_certificates,
            )
            .finish_non_exhaustive()
    }
}

/// Builds a [`TlsServer`].
#[derive(Clone, Debug)]
pub struct TlsServerBuilder {
    certificate: PathBuf,
    key: PathBuf,
    client_authorities: Vec<(PathBuf, Access)>,
}

impl TlsServerBuilder {
    /// Requires client certificates; those signed by the authority in the PEM file at `path`
    /// are granted `access`. May be called once per access.
    pub fn client_authority(mut self, path: impl Into<PathBuf>, access: Access) -> Self {
        self.client_authorities.push((path.into(), access));
        self
    }

    pub fn build(self) -> Result<TlsServer> {
        let chain = certificates(&self.certificate, "TLS certificate file")?;
        let key = private_key(&self.key)?;
        let mut all = RootCertStore::empty();
        let mut read_write = RootCertStore::empty();
        for (path, access) in &self.client_authorities {
            for cert in certificates(path, "client certificate authority file")? {
                let add = |store: &mut RootCertStore| {
                    store
                        .add(cert.clone())
                        .map_err(|e| tls_error("client certificate authority file", path, e))
                };
                add(&mut all)?;
                if *access == Access::ReadWrite {
                    add(&mut read_write)?;
                }
            }
        }
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidArgument(format!("TLS setup: {e}")))?;
        let requires = !self.client_authorities.is_empty();
        let (builder, read_write) = if requires {
            let first = &self.client_authorities[0].0;
            let verifier = client_verifier(Arc::new(all), first)?;
            let read_write = if read_write.is_empty() {
                None
            } else {
                Some(client_verifier(Arc::new(read_write), first)?)
            };
            (builder.with_client_cert_verifier(verifier), read_write)
        } else {
            (builder.with_no_client_auth(), None)
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| {
            Error::InvalidArgument(format!(
                "TLS certificate {} and key {} do not go together: {e}",
                self.certificate.display(),
                self.key.display()
            ))
        })?;
        Ok(TlsServer {
            config: Arc::new(config),
            read_write,
            requires_client_certificates: requires,
        })
    }
}

impl TlsServer {
    /// A server presenting the certificate chain and key in these PEM files.
    pub fn builder(certificate: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsServerBuilder {
        TlsServerBuilder {
            certificate: certificate.into(),
            key: key.into(),
            client_authorities: Vec::new(),
        }
    }

    /// Does a client need a certificate to connect?
    pub fn requires_client_certificates(&self) -> bool {
        self.requires_client_certificates
    }

    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The access a client's verified certificate chain grants (read-write when no client
    /// certificates are required: the token, if any, decides then).
    pub(crate) fn access_of(&self, chain: Option<&[CertificateDer<'static>]>) -> Access {
        if !self.requires_client_certificates {
            return Access::ReadWrite;
        }
        let (Some(verifier), Some([end_entity, intermediates @ ..])) = (&self.read_write, chain)
        else {
            return Access::ReadOnly;
        };
        match verifier.verify_client_cert(end_entity, intermediates, UnixTime::now()) {
            Ok(_) => Access::ReadWrite,
            Err(_) => Access::ReadOnly,
        }
    }
}

/// A client's TLS: whom it trusts to have signed the server's certificate, the name it checks
/// that certificate against, and its own certificate if it has one.
#[derive(Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Builds a [`TlsClient`].
#[derive(Clone, Debug)]
pub struct TlsClientBuilder {
    authority: PathBuf,
    identity: Option<(PathBuf, PathBuf)>,
    server_name: Option<String>,
}

impl TlsClientBuilder {
    /// Presents the certificate chain and key in these PEM files to the server.
    pub fn certificate(mut self, certificate: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((certificate.into(), key.into()));
        self
    }

    /// Checks the server's certificate against `name` rather than the host of the address.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    pub fn build(self) -> Result<TlsClient> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::InvalidArgument(format!("TLS setup: {e}")))?
            .with_root_certificates(roots(&self.authority)?);
        let config = match &self.identity {
            Some((certificate, key)) => builder
                .with_client_auth_cert(
                    certificates(certificate, "TLS certificate file")?,
                    private_key(key)?,
                )
                .map_err(|e| {
                    Error::InvalidArgument(format!(
                        "TLS certificate {} and key {} do not go together: {e}",
                        certificate.display(),
                        key.display()
                    ))
                })?,
            None => builder.with_no_client_auth(),
        };
        let server_name = self
            .server_name
            .map(|name| {
                ServerName::try_from(name.clone())
                    .map_err(|e| Error::InvalidArgument(format!("TLS server name {name:?}: {e}")))
            })
            .transpose()?;
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
        })
    }
}

impl TlsClient {
    /// A client that trusts the certificate authorities in the PEM file at `authority`.
    pub fn builder(authority: impl Into<PathBuf>) -> TlsClientBuilder {
        TlsClientBuilder {
            authority: authority.into(),
            identity: None,
            server_name: None,
        }
    }

    pub(crate) fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }

    /// The name to check the certificate of the server at `address` against.
    pub(crate) fn server_name_for(&self, address: &str) -> Result<ServerName<'static>> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        let host = match address.rsplit_once(':') {
            Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
            None => address,
        };
        ServerName::try_from(host.to_string()).map_err(|e| {
            Error::InvalidArgument(format!(
                "TLS: the host of {address} is not a name to check a certificate against \
                 ({e}); name one (--tls-server-name)"
            ))
        })
    }
}
