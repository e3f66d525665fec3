//! Fuzz target: the handshake at both ends on arbitrary input. The server's state machine
//! takes any sequence of decoded requests (with and without tokens required, with either
//! certificate access) and must welcome only a client whose proof checks; the client's check
//! takes any welcome; and the server's TLS handshake takes arbitrary bytes as a client's,
//! ending in a refusal, never a panic. Run with `cargo +nightly fuzz run handshake`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_net::auth::{Access, ServerAuth, Token};
use lodestore_net::frame::read_frame;
use lodestore_net::handshake::{check_welcome, ServerHandshake, ServerStep};
use lodestore_net::message::{decode, Request, Response};
use lodestore_net::tls::transport::Transport;
use std::io::{Read, Write};
use std::sync::OnceLock;

fn token() -> Token {
    Token::new(b"fuzzing-token-0123456789".to_vec()).unwrap()
}

/// A socket whose peer sends `input` and then closes; what is written goes nowhere.
struct Scripted<'a>(&'a [u8]);

impl Read for Scripted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn tls_server() -> &'static lodestore_net::TlsServer {
    static SERVER: OnceLock<(tempfile::TempDir, lodestore_net::TlsServer)> = OnceLock::new();
    &SERVER
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let set = lodestore_net::tls::certs::write_set(dir.path(), &[]).unwrap();
            let server =
                lodestore_net::TlsServer::builder(&set.server_certificate, &set.server_key)
                    .client_authority(&set.authority, Access::ReadWrite)
                    .build()
                    .unwrap();
            (dir, server)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    if selector & 0x80 != 0 {
        // Bytes a client sends a TLS server: the handshake fails or (never, for noise)
        // succeeds; either way without panicking.
        let _ = Transport::accept(Scripted(rest), tls_server());
        return;
    }
    let auth = if selector & 1 == 0 {
        ServerAuth::none()
    } else {
        ServerAuth::none().with(token(), Access::ReadWrite)
    };
    let certificate_access = if selector & 2 == 0 {
        Access::ReadWrite
    } else {
        Access::ReadOnly
    };
    let mut server = ServerHandshake::default();
    let mut input = rest;
    let mut fixed_nonce = 0u8;
    while let Ok(frame) = read_frame(&mut input) {
        if let Ok(request) = decode::<Request>(&frame.body) {
            let was_challenged = matches!(server, ServerHandshake::Challenged { .. });
            fixed_nonce = fixed_nonce.wrapping_add(1);
            let step = server.step(request, &auth, certificate_access, || {
                vec![fixed_nonce; lodestore_net::auth::NONCE_BYTES]
            });
            if let ServerStep::Welcome {
                access, by_token, ..
            } = &step
            {
                // Welcomed without a token only where none is required; with one only after
                // a challenge whose proof checked (the fuzzer cannot forge an HMAC).
                assert_eq!(*by_token, auth.is_required());
                if *by_token {
                    assert!(was_challenged);
                }
                if certificate_access == Access::ReadOnly {
                    assert_eq!(*access, Access::ReadOnly);
                }
            }
            if matches!(step, ServerStep::Refuse(_)) {
                break;
            }
        }
        if let Ok(Response::Welcome { server_proof, .. }) = decode::<Response>(&frame.body) {
            let proof = server_proof.as_ref().map(|p| p.as_slice());
            let nonce = [1u8; 32];
            // A forged proof never passes the client's check.
            assert!(check_welcome(Some(&token()), &nonce, Some(&[2u8; 32]), proof).is_err());
            let _ = check_welcome(None, &nonce, None, proof);
        }
    }
});
