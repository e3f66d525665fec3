//! The command line's side of who may talk to a server: a client's token and TLS files, and
//! `lodestore certs`, which makes a set of certificates to serve TLS with.

use lodestore::{Credentials, Result, TlsClient, Token};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// How a command that connects to a server proves who it is.
#[derive(clap::Args, Debug, Default)]
pub struct ClientSecurityArgs {
    /// File holding the token the server requires.
    #[arg(long, requires = "connect")]
    pub token_file: Option<PathBuf>,
    /// Talk TLS, trusting the certificate authorities in this PEM file to have signed the
    /// server's certificate (`certs` makes one: ca.pem).
    #[arg(long, requires = "connect")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls-ca: present the certificate in this PEM file to a server that requires
    /// client certificates (with --tls-key).
    #[arg(long, requires_all = ["tls_ca", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, a PEM file.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With --tls-ca: check the server's certificate against this name rather than the host
    /// of the address.
    #[arg(long, requires = "tls_ca")]
    pub tls_server_name: Option<String>,
}

impl ClientSecurityArgs {
    /// The token and TLS configuration these arguments name, read from their files.
    pub fn credentials(&self) -> Result<Credentials> {
        let token = self
            .token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?;
        let tls = match &self.tls_ca {
            Some(ca) => {
                let mut builder = TlsClient::builder(ca);
                if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
                    builder = builder.certificate(cert, key);
                }
                if let Some(name) = &self.tls_server_name {
                    builder = builder.server_name(name);
                }
                Some(builder.build()?)
            }
            None => None,
        };
        Ok(Credentials { token, tls })
    }
}

/// Where a store's snapshot pages are archived, when not in the local archive beside it.
#[derive(clap::Args, Debug, Default)]
pub struct ArchiveArgs {
    /// Archive snapshot pages on archive nodes (see `archive-serve`), S3-compatible object
    /// storage, a DHT of archive peers (see `archive-peer`) or a folder instead of the local
    /// archive beside the store: lodestore://HOST:PORT,HOST:PORT?factor=N (a page is archived
    /// once N nodes hold it; N defaults to 2, or 1 with one node),
    /// s3://BUCKET/PREFIX?endpoint=URL&region=NAME (keys from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY), p2p://ID@HOST:PORT,.../NAMESPACE?replicas=N (each page on N
    /// peers; N defaults as for nodes), or file://PATH. A store that archived its pages there
    /// must be opened with the same URL to read its past.
    #[arg(long, value_name = "URL")]
    pub archive: Option<String>,
    /// With --archive: file holding the token the archive nodes require, or that of a
    /// private DHT (its peers' --token-file).
    #[arg(long, requires = "archive")]
    pub archive_token_file: Option<PathBuf>,
    /// With --archive: talk TLS to the archive nodes, trusting the certificate authorities in
    /// this PEM file to have signed their certificates (`certs` makes one: ca.pem).
    #[arg(long, requires = "archive")]
    pub archive_tls_ca: Option<PathBuf>,
}

impl ArchiveArgs {
    /// `options` with the archive these arguments name, if any.
    pub fn apply(&self, options: lodestore::Options) -> Result<lodestore::Options> {
        let Some(url) = &self.archive else {
            return Ok(options);
        };
        let token = self
            .archive_token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?;
        let tls = self
            .archive_tls_ca
            .as_deref()
            .map(|ca| TlsClient::builder(ca).build())
            .transpose()?;
        let archive = lodestore::archive_from_url(url, Credentials { token, tls })?;
        Ok(options.snapshot_archive(archive))
    }
}

/// `lodestore certs DIR`: writes a certificate set and says how to use it.
pub fn certs(dir: &Path, names: &[String]) -> Result<ExitCode> {
    let set = lodestore::tls_certs::write_set(dir, names)?;
    println!("wrote a certificate set to {}:", dir.display());
    for file in set.files() {
        println!("  {}", file.display());
    }
    println!(
        "\nserve with:   lodestore serve STORE --listen ADDR --tls-cert {} --tls-key {} \\\n\
         \x20               --tls-client-ca {} --tls-read-only-client-ca {}",
        set.server_certificate.display(),
        set.server_key.display(),
        set.authority.display(),
        set.read_only_authority.display()
    );
    println!(
        "connect with: lodestore stress --connect ADDR --acks FILE --tls-ca {} \\\n\
         \x20               --tls-cert {} --tls-key {}",
        set.authority.display(),
        set.client_certificate.display(),
        set.client_key.display()
    );
    Ok(ExitCode::SUCCESS)
}
