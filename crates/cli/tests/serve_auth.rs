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

/// `lodestore certs` makes what `serve` and `stress` need for TLS with client certificates:
/// the client certificate commits, the read-only one cannot write, and a client without a
/// certificate, or trusting another authority, is refused with a clear error on both sides.
#[test]
fn tls_with_client_certificates_from_lodestore_certs() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    let out = lodestore().arg("certs").arg(&tls).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("--tls-client-ca"), "{said}");
    // A second run into the same folder overwrites nothing.
    let again = lodestore().arg("certs").arg(&tls).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwritten"));
    let file = |name: &str| tls.join(name).to_str().unwrap().to_string();

    let log = dir.path().join("serve.log");
    let mut server = lodestore()
        .arg("serve")
        .arg(dir.path().join("s"))
        .args(["--listen", "127.0.0.1:0"])
        .args([
            "--tls-cert",
            &file("server.pem"),
            "--tls-key",
            &file("server.key"),
        ])
        .args(["--tls-client-ca", &file("ca.pem")])
        .args(["--tls-read-only-client-ca", &file("read-only-ca.pem")])
        .env("LODESTORE_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let address = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string()
    };
    let stress_tls = |acks: &str, ca: &str, identity: Option<(&str, &str)>| {
        let mut command = lodestore();
        command
            .args(["stress", "--connect", &address, "--accounts", "20"])
            .args(["--threads", "2", "--seconds", "0.5", "--acks"])
            .arg(dir.path().join(acks))
            .args(["--tls-ca", ca]);
        if let Some((cert, key)) = identity {
            command.args(["--tls-cert", cert, "--tls-key", key]);
        }
        command.output().unwrap()
    };
    let out = stress_tls(
        "acks",
        &file("ca.pem"),
        Some((&file("client.pem"), &file("client.key"))),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(acknowledged(&dir.path().join("acks")).0 > 0);

    let out = stress_tls(
        "acks-2",
        &file("ca.pem"),
        Some((&file("read-only-client.pem"), &file("read-only-client.key"))),
    );
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("may only read"), "{said}");

    let out = stress_tls("acks-3", &file("ca.pem"), None);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("TLS handshake failed"), "{said}");
    assert!(said.contains("CertificateRequired"), "{said}");

    // A client that trusts another authority refuses the server.
    let other = dir.path().join("other");
    assert!(lodestore()
        .arg("certs")
        .arg(&other)
        .status()
        .unwrap()
        .success());
    let out = stress_tls(
        "acks-4",
        other.join("ca.pem").to_str().unwrap(),
        Some((&file("client.pem"), &file("client.key"))),
    );
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("invalid peer certificate"), "{said}");

    // A plain client is told the server speaks TLS.
    let out = stress(&address, &dir.path().join("acks-5"), None);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("speaks TLS"), "{said}");

    server.kill().unwrap();
    server.wait().unwrap();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("refused a connection") && logged.contains("TLS handshake failed"),
        "{logged}"
    );
}

/// Bad TLS files are refused before anything starts, each error naming the file.
#[test]
fn bad_tls_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    assert!(lodestore()
        .arg("certs")
        .arg(&tls)
        .output()
        .unwrap()
        .status
        .success());
    let file = |name: &str| tls.join(name).to_str().unwrap().to_string();
    let serve = |cert: &str, key: &str| {
        lodestore()
            .arg("serve")
            .arg(dir.path().join("s"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                cert,
                "--tls-key",
                key,
            ])
            .output()
            .unwrap()
    };
    for (cert, key, expected) in [
        (file("ca.pem"), file("client.key"), "do not go together"),
        (
            file("server.key"),
            file("server.key"),
            "holds no PEM certificate",
        ),
        (file("server.pem"), file("missing.key"), "missing.key"),
    ] {
        let out = serve(&cert, &key);
        assert_eq!(out.status.code(), Some(2));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(expected), "{said}");
    }
    assert!(!dir.path().join("s").exists());
}
