//! The Lodestore handshake as two pure state machines, one per end, with no I/O: the server's
//! (hello, challenge, proof, welcome; see `crate::auth`) and the client's check of what the
//! server answers. The server loop and `RemotePageServer` drive them; the fuzz target
//! `handshake` drives them with arbitrary messages.

use crate::auth::{Access, ServerAuth, Token, NONCE_BYTES};
use crate::message::Request;

/// Where a server's end of the handshake stands.
#[derive(Debug, Default)]
pub enum ServerHandshake {
    #[default]
    Start,
    /// The server sent its nonce and waits for the proof.
    Challenged {
        client: String,
        client_nonce: Vec<u8>,
        server_nonce: Vec<u8>,
    },
    Done,
}

/// What the server does with one request of the handshake.
#[derive(Debug, PartialEq, Eq)]
pub enum ServerStep {
    /// Send this nonce as a challenge and wait for the proof.
    Challenge { nonce: Vec<u8> },
    /// Welcome the client with this access (and the server's proof, where a token was
    /// proven). The handshake is done.
    Welcome {
        client: String,
        access: Access,
        server_proof: Option<Vec<u8>>,
        /// Proven by a token (not only by a certificate, or by nothing).
        by_token: bool,
    },
    /// Refuse with this reason and close the connection.
    Refuse(String),
}

impl ServerHandshake {
    pub fn is_done(&self) -> bool {
        matches!(self, ServerHandshake::Done)
    }

    /// Takes one request. `certificate_access` is what the client's TLS certificate grants
    /// (read-write where none is required); a token's access is narrowed by it. A refusal
    /// leaves the handshake where it started: the connection closes anyway.
    pub fn step(
        &mut self,
        request: Request,
        auth: &ServerAuth,
        certificate_access: Access,
        fresh_nonce: impl FnOnce() -> Vec<u8>,
    ) -> ServerStep {
        match (std::mem::take(self), request) {
            (ServerHandshake::Start, Request::Hello { client, nonce }) => {
                if nonce.len() != NONCE_BYTES {
                    return ServerStep::Refuse(format!(
                        "a hello nonce has {NONCE_BYTES} bytes, not {}",
                        nonce.len()
                    ));
                }
                if !auth.is_required() {
                    *self = ServerHandshake::Done;
                    return ServerStep::Welcome {
                        client,
                        access: certificate_access,
                        server_proof: None,
                        by_token: false,
                    };
                }
                let server_nonce = fresh_nonce();
                debug_assert_eq!(server_nonce.len(), NONCE_BYTES);
                *self = ServerHandshake::Challenged {
                    client,
                    client_nonce: nonce,
                    server_nonce: server_nonce.clone(),
                };
                ServerStep::Challenge {
                    nonce: server_nonce,
                }
            }
            (
                ServerHandshake::Challenged {
                    client,
                    client_nonce,
                    server_nonce,
                },
                Request::Prove { proof },
            ) => match auth.verify(&server_nonce, &client_nonce, &client, &proof) {
                Some((access, server_proof)) => {
                    *self = ServerHandshake::Done;
                    ServerStep::Welcome {
                        client,
                        access: access.narrowed_by(certificate_access),
                        server_proof: Some(server_proof),
                        by_token: true,
                    }
                }
                None => ServerStep::Refuse(
                    "authentication failed: the client's proof matches no token".into(),
                ),
            },
            (ServerHandshake::Start, other) => ServerStep::Refuse(format!(
                "the first request must be hello, not {}",
                other.name()
            )),
            (_, other) => {
                ServerStep::Refuse(format!("{} out of turn in the handshake", other.name()))
            }
        }
    }
}

/// The client's check of a welcome: did the server authenticate as the client expects? With
/// a token, the server must have challenged (`server_nonce`) and sent a proof that checks;
/// without one, it must not have challenged. `Ok(true)`: the server proved it holds the
/// token; `Ok(false)`: no token on either side; `Err`: the reason to refuse the server.
pub fn check_welcome(
    token: Option<&Token>,
    client_nonce: &[u8],
    server_nonce: Option<&[u8]>,
    server_proof: Option<&[u8]>,
) -> Result<bool, String> {
    match (token, server_nonce, server_proof) {
        (None, None, _) => Ok(false),
        (Some(token), Some(server_nonce), Some(proof))
            if token.checks_server(server_nonce, client_nonce, proof) =>
        {
            Ok(true)
        }
        (Some(_), None, _) => Err(
            "does not ask for a token, so it cannot prove it is the server that holds it; \
             refusing to use it"
                .into(),
        ),
        (None, Some(_), _) => Err("requires a token, and none was given".into()),
        _ => Err("did not prove that it holds the token".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::nonce;

    fn token(text: &str) -> Token {
        Token::new(text.as_bytes().to_vec()).unwrap()
    }

    fn hello(nonce: Vec<u8>) -> Request {
        Request::Hello {
            client: "c".into(),
            nonce,
        }
    }

    #[test]
    fn a_token_handshake_welcomes_only_the_right_proof_and_both_ends_agree() {
        let writer = token("writer-token-0123456");
        let auth = ServerAuth::none().with(writer.clone(), Access::ReadWrite);
        let client_nonce = nonce();
        let mut server = ServerHandshake::default();
        let ServerStep::Challenge { nonce: challenge } =
            server.step(hello(client_nonce.clone()), &auth, Access::ReadWrite, nonce)
        else {
            panic!("no challenge")
        };
        let proof = writer.client_proof(&challenge, &client_nonce, "c");
        let step = server.step(Request::Prove { proof }, &auth, Access::ReadOnly, nonce);
        let ServerStep::Welcome {
            access,
            server_proof,
            by_token,
            ..
        } = step
        else {
            panic!("{step:?}")
        };
        assert!(server.is_done() && by_token);
        // The certificate granted read-only: the narrower access wins.
        assert_eq!(access, Access::ReadOnly);
        assert_eq!(
            check_welcome(
                Some(&writer),
                &client_nonce,
                Some(&challenge),
                server_proof.as_deref()
            ),
            Ok(true)
        );
        // An impostor's proof, or none, is refused by the client.
        let other = token("other-token-99999999");
        let forged = other.server_proof(&challenge, &client_nonce);
        assert!(check_welcome(
            Some(&writer),
            &client_nonce,
            Some(&challenge),
            Some(&forged)
        )
        .is_err());
        assert!(check_welcome(Some(&writer), &client_nonce, None, None).is_err());
    }

    #[test]
    fn out_of_turn_requests_and_bad_nonces_are_refused() {
        let auth = ServerAuth::none().with(token("writer-token-0123456"), Access::ReadWrite);
        let mut server = ServerHandshake::default();
        assert!(matches!(
            server.step(
                Request::Begin {
                    kind: crate::message::WireTxnKind::ReadWrite
                },
                &auth,
                Access::ReadWrite,
                nonce
            ),
            ServerStep::Refuse(_)
        ));
        let mut server = ServerHandshake::default();
        assert!(matches!(
            server.step(hello(vec![1; 5]), &auth, Access::ReadWrite, nonce),
            ServerStep::Refuse(_)
        ));
        let mut server = ServerHandshake::default();
        server.step(hello(nonce()), &auth, Access::ReadWrite, nonce);
        // A second hello instead of the proof.
        assert!(matches!(
            server.step(hello(nonce()), &auth, Access::ReadWrite, nonce),
            ServerStep::Refuse(_)
        ));
        assert!(!server.is_done());
    }
}
