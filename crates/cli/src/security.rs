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
