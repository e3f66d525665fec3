//! kill -9 of a real server: `lodestore serve` with three `lodestore stress --connect` clients
//! running bank transfers, killed at a random moment, again and again on the same store. After
//! each kill the store is read with `lodestore dump --json` (which recovers it) and checked as
//! an outside tool would: the total balance is conserved, and every transfer any client
//! acknowledged is in the transfer counts of both its accounts. Then the server restarts and the
//! clients connect again.

use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ACCOUNTS: usize = 30;
const CLIENTS: usize = 3;
/// Rounds in the test suite; `LODESTORE_KILL9_ROUNDS=20` for the full acceptance run.
const ROUNDS: usize = 8;

fn lodestore() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lodestore"))
}

/// Balances and transfer counts of every account, read from `lodestore dump --json`.
fn accounts(store: &Path) -> Vec<(i64, u64)> {
    let out = lodestore()
        .args(["dump", store.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bytes_of = |oid: u64| -> Vec<u8> {
        let object = dump["objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["oid"].as_u64() == Some(oid))
            .unwrap_or_else(|| panic!("object {oid} missing from the dump"));
        hex::decode(object["bytes"].as_str().unwrap()).unwrap()
    };
    let bank = bytes_of(dump["roots"]["bank"].as_u64().expect("bank root"));
    bank.chunks_exact(8)
        .map(|c| {
            let account = bytes_of(u64::from_le_bytes(c.try_into().unwrap()));
            assert_eq!(account.len(), 16);
            (
                i64::from_le_bytes(account[..8].try_into().unwrap()),
                u64::from_le_bytes(account[8..].try_into().unwrap()),
            )
        })
        .collect()
}

/// How often each account appears in the acknowledged transfers.
fn acknowledged(acks: &Path) -> (usize, HashMap<usize, u64>) {
    let text = std::fs::read_to_string(acks).unwrap_or_default();
    let mut per_account = HashMap::new();
    let mut transfers = 0;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        // A line cut by the kill is not an acknowledgement.
        if fields.len() != 3 || !text.ends_with('\n') && line == text.lines().last().unwrap() {
            continue;
        }
        for index in &fields[1..] {
            *per_account
                .entry(index.parse::<usize>().unwrap())
                .or_insert(0) += 1;
        }
        transfers += 1;
    }
    (transfers, per_account)
}

/// Starts `lodestore serve` on a free port; returns the child and its address.
fn start_server(store: &Path) -> (Child, String) {
    let mut child = lodestore()
        .args(["serve", store.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, address)
}

fn stress(address: &str, acks: &Path, seconds: &str, threads: &str) -> Command {
    let mut command = lodestore();
    command
        .args([
            "stress",
            "--connect",
            address,
            "--accounts",
            &ACCOUNTS.to_string(),
        ])
        .args(["--threads", threads, "--seconds", seconds, "--acks"])
        .arg(acks)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Waits for `child` to exit, killing it after `limit`.
fn reap(child: &mut Child, limit: Duration) {
    let started = Instant::now();
    while started.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().ok();
    child.wait().unwrap();
    panic!("a client did not notice its server was gone within {limit:?}");
}

#[test]
fn kill_minus_nine_of_the_server_under_three_clients_loses_nothing_acknowledged() {
    let rounds: usize = std::env::var("LODESTORE_KILL9_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(ROUNDS);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    let acks: Vec<_> = (0..CLIENTS)
        .map(|c| dir.path().join(format!("acks-{c}")))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);

    // One client creates the bank before several share it.
    let (mut server, address) = start_server(&store);
    let status = stress(&address, &acks[0], "0", "1").status().unwrap();
    assert!(status.success());

    let mut total_acknowledged = 0;
    for round in 0..rounds {
        let mut clients: Vec<Child> = acks
            .iter()
            .map(|a| stress(&address, a, "60", "2").spawn().unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(300..900)));
        server.kill().unwrap(); // SIGKILL
        server.wait().unwrap();
        for client in &mut clients {
            reap(client, Duration::from_secs(20));
        }

        let accounts = accounts(&store);
        assert_eq!(accounts.len(), ACCOUNTS);
        let total: i64 = accounts.iter().map(|a| a.0).sum();
        assert_eq!(
            total,
            1000 * ACCOUNTS as i64,
            "round {round}: money created or lost"
        );
        let counted: u64 = accounts.iter().map(|a| a.1).sum();
        let mut transfers = 0;
        let mut per_account: HashMap<usize, u64> = HashMap::new();
        for file in &acks {
            let (n, counts) = acknowledged(file);
            transfers += n;
            for (index, count) in counts {
                *per_account.entry(index).or_insert(0) += count;
            }
        }
        for (index, &count) in &per_account {
            assert!(
                accounts[*index].1 >= count,
                "round {round}: account {index} shows {} transfers, {count} acknowledged",
                accounts[*index].1
            );
        }
        assert!(
            counted / 2 >= transfers as u64,
            "round {round}: acknowledged transfers lost"
        );
        total_acknowledged = transfers;

        (server, _) = start_server_at(&store, &address);
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        total_acknowledged > 100,
        "only {total_acknowledged} transfers acknowledged"
    );
}

/// Restarts the server on the same address (the clients of the next round connect there).
fn start_server_at(store: &Path, address: &str) -> (Child, String) {
    // The port may linger a moment after the kill; retry briefly.
    for _ in 0..50 {
        let mut child = lodestore()
            .args(["serve", store.to_str().unwrap(), "--listen", address])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.starts_with("listening on ") {
            return (child, address.to_string());
        }
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("could not restart the server on {address}");
}
