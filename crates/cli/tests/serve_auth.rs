//! `lodestore serve` with tokens, as an operator runs it: clients with the token work, clients
//! without it are refused with a clear error on both sides, a read-only token cannot write,
//! and an address other than loopback is refused without a token.

mod common;

use common::{acknowledged, lodestore, spawn_serve};
use std::path::Path;
use std::process::Child;

/// Starts `serve` on a free loopback port with `extra` arguments; returns it and its address.
fn start(store: &Path, extra: &[&str]) -> (Child, String) {
    let extra: Vec<&std::ffi::OsStr> = extra.iter().map(|a| a.as_ref()).collect();
    spawn_serve(store, "127.0.0.1:0", &extra).expect("serve started")
}

fn stress(address: &str, acks: &Path, token: Option<&Path>) -> std::process::Output {
    let mut command = lodestore();
    command
        .args(["stress", "--connect", address, "--accounts", "20"])
        .args(["--threads", "2", "--seconds", "0.5", "--acks"])
        .arg(acks);
    if let Some(token) = token {
        command.arg("--token-file").arg(token);
    }
    command.output().unwrap()
}

#[test]
fn tokens_let_clients_in_and_keep_others_out() {
    let dir = tempfile::tempdir().unwrap();
    let (writer, reader) = (dir.path().join("token"), dir.path().join("read-only"));
    std::fs::write(&writer, "a-token-for-writers-0001\n").unwrap();
    std::fs::write(&reader, "a-token-for-readers-0002\n").unwrap();
    let store = dir.path().join("s");
    let (mut server, address) = start(
        &store,
        &[
            "--token-file",
            writer.to_str().unwrap(),
            "--read-only-token-file",
            reader.to_str().unwrap(),
        ],
    );

    let acks = dir.path().join("acks");
    let out = stress(&address, &acks, Some(&writer));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(acknowledged(&acks).0 > 0);

    let out = stress(&address, &dir.path().join("acks-2"), None);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("requires a token"), "{said}");

    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not-the-right-token-xyz").unwrap();
    let out = stress(&address, &dir.path().join("acks-3"), Some(&wrong));
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("authentication failed"), "{said}");
    assert!(
        !said.contains("not-the-right"),
        "a secret in the message: {said}"
    );

    // The read-only token reads the bank but every transfer is refused.
    let out = stress(&address, &dir.path().join("acks-4"), Some(&reader));
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("may only read"), "{said}");
    assert_eq!(acknowledged(&dir.path().join("acks-4")).0, 0);

    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn an_address_other_than_loopback_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = lodestore()
        .arg("serve")
        .arg(dir.path().join("s"))
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not a loopback address"), "{said}");
    // Nothing was created for a server that never started.
    assert!(!dir.path().join("s").exists());
}
