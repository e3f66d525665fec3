//! Snapshots from the command line: `init --snapshots`, `snapshot`, `snapshots`, `dump
//! --snapshot/--as-of` in the format of `dump`, deletion, and `info`; and the bank of
//! `stress` balancing to the same total in every snapshot, taken while transfers ran.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn lodestore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lodestore"))
        .args(args)
        .output()
        .expect("run lodestore")
}

fn ok(args: &[&str]) -> String {
    let out = lodestore(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The balances of the bank's accounts in a dump: 16-byte objects, balance first.
fn total_balance(dump: &str) -> (usize, i64) {
    let balances: Vec<i64> = dump
        .lines()
        .filter(|line| line.starts_with("object ") && line.contains(" length 16 "))
        .map(|line| {
            let bytes = hex::decode(line.rsplit(' ').next().unwrap()).unwrap();
            i64::from_le_bytes(bytes[..8].try_into().unwrap())
        })
        .collect();
    (balances.len(), balances.iter().sum())
}

/// `stress` on `store`: transfers between 40 accounts for `seconds`, from three threads.
fn bank_transfers(store: &Path, acks: &Path, seconds: &str) -> String {
    ok(&[
        "stress",
        arg(store),
        "--accounts",
        "40",
        "--threads",
        "3",
        "--seconds",
        seconds,
        "--acks",
        arg(acks),
    ])
}

#[test]
fn snapshots_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let acks = dir.path().join("acks");
    ok(&["init", arg(&store), "--snapshots"]);
    let stress = |seconds: &str| bank_transfers(&store, &acks, seconds);
    stress("0.3");
    let before = ok(&["dump", arg(&store)]);
    let taken = ok(&["snapshot", arg(&store), "--json"]);
    let first: serde_json::Value = serde_json::from_str(&taken).unwrap();
    stress("0.3");
    let now = ok(&["dump", arg(&store)]);
    assert_ne!(now, before, "the transfers changed nothing");
    // The snapshot reads as the store was when it was taken, in the same format.
    let id = first["id"].as_u64().unwrap().to_string();
    assert_eq!(ok(&["dump", arg(&store), "--snapshot", &id]), before);
    let time = first["time"].as_str().unwrap();
    assert_eq!(ok(&["dump", arg(&store), "--as-of", time]), before);
    let listed = ok(&["snapshots", arg(&store)]);
    assert!(
        listed.contains(&format!("snapshot {id} at {time}")),
        "{listed}"
    );
    assert!(ok(&["info", arg(&store)]).contains("snapshots      1"));
    // Before the first snapshot: a clear error, exit 2.
    let early = lodestore(&["dump", arg(&store), "--as-of", "2001-01-01T00:00:00Z"]);
    assert_eq!(early.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&early.stderr).contains("before the first snapshot"));
    let bad = lodestore(&["dump", arg(&store), "--as-of", "yesterday-ish"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RFC 3339"));
    // Deleted: gone from the list and no longer readable.
    assert!(ok(&["snapshot", arg(&store), "--delete", &id]).contains("deleted snapshot"));
    assert!(ok(&["snapshots", arg(&store)]).contains("no snapshots"));
    let gone = lodestore(&["dump", arg(&store), "--snapshot", &id]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no snapshot numbered"));
}

#[test]
fn every_snapshot_of_the_bank_taken_while_transfers_run_balances_to_the_same_total() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let acks = dir.path().join("acks");
    ok(&["init", arg(&store), "--snapshots"]);
    const ACCOUNTS: usize = 30;
    let (mut server, address) =
        common::spawn_serve(&store, "127.0.0.1:0", &[]).expect("the server starts");
    // Transfers over TCP, and snapshots taken over TCP by another process meanwhile: each
    // holds whole transfers only.
    let mut stress = common::lodestore()
        .args(["stress", "--connect", &address])
        .args(["--accounts", &ACCOUNTS.to_string(), "--threads", "4"])
        .args(["--seconds", "2", "--acks", arg(&acks)])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut ids = Vec::new();
    for _ in 0..5 {
        let taken: serde_json::Value =
            serde_json::from_str(&ok(&["snapshot", "--connect", &address, "--json"])).unwrap();
        ids.push(taken["id"].as_u64().unwrap().to_string());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(stress.wait().unwrap().success());
    let listed = ok(&["snapshots", "--connect", &address, "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["snapshots"].as_array().unwrap().len(), ids.len());
    server.kill().unwrap();
    server.wait().unwrap();
    let mut dumps = Vec::new();
    for id in &ids {
        let dump = ok(&["dump", arg(&store), "--snapshot", id]);
        assert_eq!(
            total_balance(&dump),
            (ACCOUNTS, 1000 * ACCOUNTS as i64),
            "snapshot {id}"
        );
        dumps.push(dump);
    }
    dumps.dedup();
    assert_eq!(
        dumps.len(),
        ids.len(),
        "transfers ran between the snapshots"
    );
}

/// `--archive` on the command line: a store's snapshot pages archived on an archive node
/// (`archive-serve`, with a token, over TLS) read back by `dump --snapshot --archive` as the store was;
/// without the URL, or with the node gone, the past is refused by name.
#[test]
fn snapshot_pages_on_an_archive_node_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (store, acks, token) = (
        dir.path().join("store"),
        dir.path().join("acks"),
        dir.path().join("token"),
    );
    std::fs::write(&token, "archive-node-cli-test-token").unwrap();
    let tls = dir.path().join("tls");
    ok(&["certs", arg(&tls)]);
    let (cert, key, ca) = (
        tls.join("server.pem"),
        tls.join("server.key"),
        tls.join("ca.pem"),
    );
    let (mut node, address) = common::spawn_listening(
        "archive-serve",
        &dir.path().join("node"),
        "127.0.0.1:0",
        &[
            "--page-size".as_ref(),
            "8192".as_ref(),
            "--token-file".as_ref(),
            token.as_os_str(),
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
    )
    .expect("the archive node starts");
    let url = format!("lodestore://{address}");
    let with_archive = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--archive", &url, "--archive-token-file", arg(&token)]);
        all.extend(["--archive-tls-ca", arg(&ca)]);
        all.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&args)
    };
    ok(&["init", arg(&store), "--snapshots"]);
    let stress = || bank_transfers(&store, &acks, "1");
    stress();
    let took = run(with_archive(&["snapshot", arg(&store), "--json"]));
    let id = serde_json::from_str::<serde_json::Value>(&took).unwrap()["id"]
        .as_u64()
        .unwrap()
        .to_string();
    let then = ok(&["dump", arg(&store)]);
    // Transfers change every account page; their copies wait in the snapshot log (stress
    // names no archive) until an open with the archive ships them to the node: the next
    // snapshot's, which closes the store with nothing left waiting.
    stress();
    run(with_archive(&["snapshot", arg(&store)]));
    let listed = run(with_archive(&["snapshots", arg(&store), "--json"]));
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["copies_waiting"], 0, "{listed}");
    assert!(listed["archive_bytes"].as_u64().unwrap() > 8192, "{listed}");
    let past = run(with_archive(&["dump", arg(&store), "--snapshot", &id]));
    assert_eq!(past, then, "as of the snapshot, from the archive node");
    assert_ne!(
        ok(&["dump", arg(&store)]),
        then,
        "the transfers changed the store"
    );

    // Without the URL the store knows its pages are elsewhere.
    let out = lodestore(&["dump", arg(&store), "--snapshot", &id]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("archived at {url}")), "{stderr}");
    // With the node gone, the read fails naming it.
    node.kill().unwrap();
    node.wait().unwrap();
    let args = with_archive(&["dump", arg(&store), "--snapshot", &id]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = lodestore(&args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&address), "{stderr}");
}

/// `--archive file://DIR`, `--archive s3://...` (keys from the environment, an s3s-fs server
/// where the test servers are installed) and `--archive p2p://...` (a DHT of four peers, each
/// `lodestore archive-peer`): the pages a snapshot needs are archived there, read back by
/// `dump --snapshot` as the store was, and refused by name without the URL.
#[test]
fn snapshot_pages_in_a_folder_in_s3_and_in_a_dht_from_the_command_line() {
    use lodestore_archive_p2p::peers::{PeerCommand, PeerSet};
    use lodestore_archive_s3::servers::{S3Server, ServerKind, ACCESS_KEY, SECRET_KEY};
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(ServerKind::S3sFs).unwrap();
    let mut archives = vec![format!("file://{}", dir.path().join("history").display())];
    if let Some(server) = &server {
        server.create_bucket("cli-history").unwrap();
        archives.push(server.url("cli-history", "bank"));
    }
    let peer = PeerCommand {
        program: env!("CARGO_BIN_EXE_lodestore").into(),
        args: vec!["archive-peer".into()],
    };
    // A private DHT: its peers and the store hold the same token.
    let token = dir.path().join("dht-token");
    std::fs::write(&token, "a-token-for-the-bank-dht\n").unwrap();
    let peers = PeerSet::start_private(peer, 4, 2, Some(token.clone())).unwrap();
    archives.push(peers.url("bank", 2));
    for (n, url) in archives.iter().enumerate() {
        let store = dir.path().join(format!("store-{n}"));
        let acks = dir.path().join(format!("acks-{n}"));
        let run = |args: &[&str]| -> String {
            let mut command = Command::new(env!("CARGO_BIN_EXE_lodestore"));
            command.args(args).args(["--archive", url]);
            if url.starts_with("p2p://") {
                command.arg("--archive-token-file").arg(&token);
            }
            let out = command
                .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
                .env("AWS_REGION", "us-east-1")
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{url}: {args:?}: {stderr}");
            assert!(!stderr.contains(SECRET_KEY), "{stderr}");
            String::from_utf8(out.stdout).unwrap()
        };
        ok(&["init", arg(&store), "--snapshots"]);
        bank_transfers(&store, &acks, "1");
        let took = run(&["snapshot", arg(&store), "--json"]);
        let id = serde_json::from_str::<serde_json::Value>(&took).unwrap()["id"]
            .as_u64()
            .unwrap()
            .to_string();
        let then = ok(&["dump", arg(&store)]);
        bank_transfers(&store, &acks, "1");
        run(&["snapshot", arg(&store)]);
        let listed: serde_json::Value =
            serde_json::from_str(&run(&["snapshots", arg(&store), "--json"])).unwrap();
        assert_eq!(listed["copies_waiting"], 0, "{url}: {listed}");
        // A DHT's size is known only to its peers (a store counts what it sent).
        if !url.starts_with("p2p://") {
            assert!(
                listed["archive_bytes"].as_u64().unwrap() > 8192,
                "{url}: {listed}"
            );
        }
        let past = run(&["dump", arg(&store), "--snapshot", &id]);
        assert_eq!(past, then, "{url}: as of the snapshot");
        let out = lodestore(&["dump", arg(&store), "--snapshot", &id]);
        assert!(!out.status.success(), "{url}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("archived at"), "{url}: {stderr}");
    }
    assert_eq!(archives.len(), 2 + usize::from(server.is_some()));
    assert!(peers.bytes_held().iter().sum::<u64>() > 8192);
}
