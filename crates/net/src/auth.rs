//! Who may talk to a server: clients prove that they hold a shared secret (a token, read from a
//! file on both sides) without sending it, and the server proves the same to them.
//!
//! The handshake: the client says hello with a random nonce; a server that requires a token
//! answers with a challenge, a nonce of its own; the client answers with
//! `HMAC-SHA256(token, "lodestore client proof" | server nonce | client nonce | client name)`;
//! the server checks it against each token it accepts (in constant time) and welcomes the
//! client with its access (read-write or read-only) and its own proof,
//! `HMAC-SHA256(token, "lodestore server proof" | client nonce | server nonce)`. Fresh nonces
//! on both sides make a recorded handshake useless to replay, and the server's proof keeps a
//! client from talking to an impostor that merely accepts everyone.

use crate::tls::{TlsClient, TlsServer};
use hmac::{Hmac, Mac};
use lodestore_core::{Error, Result};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::path::Path;
use std::sync::Arc;

/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 32;
/// Shortest token accepted: 16 bytes (128 bits) of whatever the file holds.
pub const TOKEN_BYTES_MIN: usize = 16;
/// Longest token file read.
pub const TOKEN_BYTES_MAX: usize = 4096;

/// What a client may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    ReadWrite,
    /// Reads only: every request that would change the store is refused.
    ReadOnly,
}

impl Access {
    /// What a client may do when two proofs of who it is (a certificate and a token) each
    /// grant an access: the less of the two.
    pub fn narrowed_by(self, other: Access) -> Access {
        if self == Access::ReadOnly || other == Access::ReadOnly {
            Access::ReadOnly
        } else {
            Access::ReadWrite
        }
    }
}

/// A shared secret. Never printed: its `Debug` says only that it is one.
#[derive(Clone)]
pub struct Token(Arc<Vec<u8>>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// A token of these bytes (at least `TOKEN_BYTES_MIN`).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Token> {
        let bytes = bytes.into();
        if !(TOKEN_BYTES_MIN..=TOKEN_BYTES_MAX).contains(&bytes.len()) {
            return Err(Error::InvalidArgument(format!(
                "a token has from {TOKEN_BYTES_MIN} to {TOKEN_BYTES_MAX} bytes, not {}",
                bytes.len()
            )));
        }
        Ok(Token(Arc::new(bytes)))
    }

    /// The token in the file at `path`: its bytes, without a final line break.
    pub fn from_file(path: &Path) -> Result<Token> {
        let mut bytes = std::fs::read(path).map_err(|e| Error::io(path, "read the token", e))?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        Token::new(bytes).map_err(|e| match e {
            Error::InvalidArgument(reason) => {
                Error::InvalidArgument(format!("token file {}: {reason}", path.display()))
            }
            other => other,
        })
    }

    /// The token's bytes, for keys derived from it (a private DHT's pre-shared key). Never
    /// log or send them.
    pub fn secret_bytes(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(label);
        for part in parts {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac
    }

    /// What a client sends to prove it holds this token.
    pub fn client_proof(&self, server_nonce: &[u8], client_nonce: &[u8], client: &str) -> Vec<u8> {
        self.mac(
            CLIENT_LABEL,
            &[server_nonce, client_nonce, client.as_bytes()],
        )
        .finalize()
        .into_bytes()
        .to_vec()
    }

    /// What the server sends to prove it holds this token.
    pub fn server_proof(&self, server_nonce: &[u8], client_nonce: &[u8]) -> Vec<u8> {
        self.mac(SERVER_LABEL, &[client_nonce, server_nonce])
            .finalize()
            .into_bytes()
            .to_vec()
    }

    fn checks_client(
        &self,
        server_nonce: &[u8],
        client_nonce: &[u8],
        client: &str,
        proof: &[u8],
    ) -> bool {
        self.mac(
            CLIENT_LABEL,
            &[server_nonce, client_nonce, client.as_bytes()],
        )
        .verify_slice(proof)
        .is_ok()
    }

    /// Does `proof` show that the server holds this token?
    pub fn checks_server(&self, server_nonce: &[u8], client_nonce: &[u8], proof: &[u8]) -> bool {
        self.mac(SERVER_LABEL, &[client_nonce, server_nonce])
            .verify_slice(proof)
            .is_ok()
    }
}

const CLIENT_LABEL: &[u8] = b"lodestore client proof";
const SERVER_LABEL: &[u8] = b"lodestore server proof";

/// A fresh random nonce.
pub fn nonce() -> Vec<u8> {
    let mut bytes = vec![0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

/// How a client proves who it is, and whether it talks TLS.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub token: Option<Token>,
    pub tls: Option<TlsClient>,
}

/// How a server knows its clients: the tokens it accepts, each with the access it grants, and
/// its TLS (which may require client certificates). Neither: no authentication.
#[derive(Clone, Debug, Default)]
pub struct ServerAuth {
    tokens: Vec<(Token, Access)>,
    tls: Option<TlsServer>,
}

impl ServerAuth {
    /// Accepts every client (say so loudly where it serves).
    pub fn none() -> ServerAuth {
        ServerAuth::default()
    }

    /// Also accepts clients holding `token`, with `access`.
    pub fn with(mut self, token: Token, access: Access) -> ServerAuth {
        self.tokens.push((token, access));
        self
    }

    /// Serves over TLS (`crate::tls`), with client certificates if `tls` requires them.
    pub fn with_tls(mut self, tls: TlsServer) -> ServerAuth {
        self.tls = Some(tls);
        self
    }

    /// Must a client prove it holds a token?
    pub fn is_required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Must a client prove who it is, by a token or a certificate?
    pub fn authenticates_clients(&self) -> bool {
        self.is_required()
            || self
                .tls
                .as_ref()
                .is_some_and(TlsServer::requires_client_certificates)
    }

    pub fn tls(&self) -> Option<&TlsServer> {
        self.tls.as_ref()
    }

    /// The access and the server's proof for a client whose `proof` checks against one of the
    /// tokens; `None` if it checks against none. Every token is tried, so the time taken does
    /// not say which one matched.
    pub fn verify(
        &self,
        server_nonce: &[u8],
        client_nonce: &[u8],
        client: &str,
        proof: &[u8],
    ) -> Option<(Access, Vec<u8>)> {
        let mut found = None;
        for (token, access) in &self.tokens {
            if token.checks_client(server_nonce, client_nonce, client, proof) && found.is_none() {
                found = Some((*access, token.server_proof(server_nonce, client_nonce)));
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_check_only_with_the_same_token_nonces_and_name() {
        let token = Token::new(*b"0123456789abcdef").unwrap();
        let other = Token::new(*b"fedcba9876543210").unwrap();
        let (server, client) = (nonce(), nonce());
        let auth = ServerAuth::none()
            .with(other.clone(), Access::ReadOnly)
            .with(token.clone(), Access::ReadWrite);
        let proof = token.client_proof(&server, &client, "c");
        let (access, server_proof) = auth.verify(&server, &client, "c", &proof).unwrap();
        assert_eq!(access, Access::ReadWrite);
        assert!(token.checks_server(&server, &client, &server_proof));
        assert!(!other.checks_server(&server, &client, &server_proof));
        // A replay against a new server nonce, another name, or a flipped bit fails.
        assert!(auth.verify(&nonce(), &client, "c", &proof).is_none());
        assert!(auth.verify(&server, &client, "d", &proof).is_none());
        let mut flipped = proof.clone();
        flipped[0] ^= 1;
        assert!(auth.verify(&server, &client, "c", &flipped).is_none());
        let read_only = other.client_proof(&server, &client, "c");
        assert_eq!(
            auth.verify(&server, &client, "c", &read_only).unwrap().0,
            Access::ReadOnly
        );
    }

    #[test]
    fn tokens_are_read_from_files_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, b"a-secret-of-enough-length\n").unwrap();
        let token = Token::from_file(&path).unwrap();
        assert_eq!(token.0.as_slice(), b"a-secret-of-enough-length");
        assert!(!format!("{token:?}").contains("secret"));
        std::fs::write(&path, b"short\n").unwrap();
        let error = Token::from_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("token file") && error.contains("16"),
            "{error}"
        );
        assert!(!error.contains("short"), "{error}");
    }
}
