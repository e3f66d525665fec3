//! Certificates for trying TLS out or for a small deployment: two certificate authorities (one
//! whose clients may write, one whose clients may only read), a server certificate for the
//! names given, and a client certificate from each authority. `lodestore certs` writes them;
//! the tests use them. An operator with a PKI of their own uses its files instead.

use lodestore_core::{Error, Result};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the certificates written are valid, from a day before they were made.
pub const VALIDITY: Duration = Duration::from_secs(2 * 365 * 24 * 3600);

/// The names a server certificate covers besides those asked for: loopback, for local use.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The files `write_set` makes in its folder, by role.
#[derive(Clone, Debug)]
pub struct CertificateSet {
    /// The authority that signs the server's certificate and read-write clients'.
    pub authority: PathBuf,
    /// The authority that signs read-only clients' certificates.
    pub read_only_authority: PathBuf,
    pub server_certificate: PathBuf,
    pub server_key: PathBuf,
    pub client_certificate: PathBuf,
    pub client_key: PathBuf,
    pub read_only_client_certificate: PathBuf,
    pub read_only_client_key: PathBuf,
}

impl CertificateSet {
    /// The file names of a set in `dir`.
    pub fn in_folder(dir: &Path) -> CertificateSet {
        CertificateSet {
            authority: dir.join("ca.pem"),
            read_only_authority: dir.join("read-only-ca.pem"),
            server_certificate: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_certificate: dir.join("client.pem"),
            client_key: dir.join("client.key"),
            read_only_client_certificate: dir.join("read-only-client.pem"),
            read_only_client_key: dir.join("read-only-client.key"),
        }
    }

    pub fn files(&self) -> [&Path; 8] {
        [
            &self.authority,
            &self.read_only_authority,
            &self.server_certificate,
            &self.server_key,
            &self.client_certificate,
            &self.client_key,
            &self.read_only_client_certificate,
            &self.read_only_client_key,
        ]
    }
}

fn cert_error(e: rcgen::Error) -> Error {
    Error::InvalidArgument(format!("making a certificate: {e}"))
}

fn params(names: Vec<String>, common_name: &str) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(names).map_err(cert_error)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(24 * 3600)).into();
    params.not_after = (now + VALIDITY).into();
    Ok(params)
}

fn authority(common_name: &str) -> Result<(Certificate, KeyPair)> {
    let mut params = params(Vec::new(), common_name)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().map_err(cert_error)?;
    let cert = params.self_signed(&key).map_err(cert_error)?;
    Ok((cert, key))
}

fn leaf(
    names: Vec<String>,
    common_name: &str,
    purpose: ExtendedKeyUsagePurpose,
    issuer: &(Certificate, KeyPair),
) -> Result<(Certificate, KeyPair)> {
    let mut params = params(names, common_name)?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().map_err(cert_error)?;
    let cert = params
        .signed_by(&key, &issuer.0, &issuer.1)
        .map_err(cert_error)?;
    Ok((cert, key))
}

/// Writes `contents` to a new file at `path`, readable by its owner only when it is a key.
fn write_new(path: &Path, contents: &str, secret: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(|e| Error::io(path, "create", e))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(path, "write", e))
}

/// Makes a set of certificates in `dir` (created if missing) for a server reached by
/// `server_names` and loopback. Refuses to overwrite any file of a set already there.
pub fn write_set(dir: &Path, server_names: &[String]) -> Result<CertificateSet> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create", e))?;
    let set = CertificateSet::in_folder(dir);
    if let Some(existing) = set.files().into_iter().find(|f| f.exists()) {
        return Err(Error::InvalidArgument(format!(
            "{} exists already; certificates are never overwritten (use another folder)",
            existing.display()
        )));
    }
    let mut names: Vec<String> = server_names.to_vec();
    for name in LOOPBACK_NAMES {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    // Authorities of different sets must differ in name: a verifier looks an issuer up by
    // name, and would try (and fail) another set's same-named authority's signature.
    let stamp = format!(
        "{}-{:016x}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        rand::random::<u64>()
    );
    let ca = authority(&format!("Lodestore CA {stamp}"))?;
    let read_only_ca = authority(&format!("Lodestore read-only CA {stamp}"))?;
    let server = leaf(
        names,
        "Lodestore server",
        ExtendedKeyUsagePurpose::ServerAuth,
        &ca,
    )?;
    let client = leaf(
        Vec::new(),
        "Lodestore client",
        ExtendedKeyUsagePurpose::ClientAuth,
        &ca,
    )?;
    let reader = leaf(
        Vec::new(),
        "Lodestore read-only client",
        ExtendedKeyUsagePurpose::ClientAuth,
        &read_only_ca,
    )?;
    write_new(&set.authority, &ca.0.pem(), false)?;
    write_new(&set.read_only_authority, &read_only_ca.0.pem(), false)?;
    for ((cert, key), cert_path, key_path) in [
        (&server, &set.server_certificate, &set.server_key),
        (&client, &set.client_certificate, &set.client_key),
        (
            &reader,
            &set.read_only_client_certificate,
            &set.read_only_client_key,
        ),
    ] {
        write_new(cert_path, &cert.pem(), false)?;
        write_new(key_path, &key.serialize_pem(), true)?;
    }
    // The authorities' keys are not kept: a set is made whole, once.
    Ok(set)
}
