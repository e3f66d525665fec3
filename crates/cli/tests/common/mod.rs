//! What the kill -9 tests share: running the binary, reading the bank out of a store the way
//! an outside tool would, and reading the acknowledged transfers.

#![allow(dead_code)] // each test binary uses its own part

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

pub fn lodestore() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lodestore"))
}

/// Runs `lodestore ARGS`, requires it to succeed and returns what it printed.
pub fn succeed(args: &[&str]) -> String {
    let out = lodestore().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "lodestore {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `lodestore serve STORE --listen LISTEN EXTRA..`; returns it and the address it
/// prints on its first line, or `None` (the process reaped) if it did not start listening.
pub fn spawn_serve(
    store: &Path,
    listen: &str,
    extra: &[&std::ffi::OsStr],
) -> Option<(std::process::Child, String)> {
    spawn_listening("serve", store, listen, extra)
}

/// Starts `lodestore COMMAND FOLDER --listen LISTEN EXTRA..` (`serve` or `archive-serve`);
/// returns it and the address it prints on its first line, or `None` (the process reaped) if
/// it did not start listening.
pub fn spawn_listening(
    command: &str,
    folder: &Path,
    listen: &str,
    extra: &[&std::ffi::OsStr],
) -> Option<(std::process::Child, String)> {
    use std::io::BufRead;
    let mut child = lodestore()
        .arg(command)
        .arg(folder)
        .args(["--listen", listen])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    match line.trim().strip_prefix("listening on ") {
        Some(address) => Some((child, address.to_string())),
        None => {
            child.wait().unwrap();
            None
        }
    }
}

/// `lodestore stress` on the store folder `store`, quiet, appending to `acks`.
pub fn stress_on(
    store: &Path,
    acks: &Path,
    accounts: usize,
    threads: u32,
    seconds: u32,
) -> Command {
    let mut command = lodestore();
    command
        .arg("stress")
        .arg(store)
        .args(["--accounts", &accounts.to_string()])
        .args(["--threads", &threads.to_string()])
        .args(["--seconds", &seconds.to_string()])
        .arg("--acks")
        .arg(acks)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    command
}

/// Balances and transfer counts of every account, read from `lodestore dump --json`.
pub fn accounts(store: &Path) -> Vec<(i64, u64)> {
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
pub fn acknowledged(acks: &Path) -> (usize, HashMap<usize, u64>) {
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

/// Reads the bank out of `store` and checks it against the acknowledgements in `acks`: the
/// total balance is conserved, every transfer touched two accounts, and every acknowledged
/// transfer is counted in both of its accounts. Returns the acknowledged transfers.
pub fn check_bank(store: &Path, acks: &[&Path], accounts_expected: usize, round: usize) -> usize {
    let accounts = accounts(store);
    assert_eq!(accounts.len(), accounts_expected);
    let total: i64 = accounts.iter().map(|a| a.0).sum();
    assert_eq!(
        total,
        1000 * accounts_expected as i64,
        "round {round}: money created or lost"
    );
    let counted: u64 = accounts.iter().map(|a| a.1).sum();
    assert_eq!(
        counted % 2,
        0,
        "round {round}: a transfer touched one account"
    );
    let mut transfers = 0;
    let mut per_account: HashMap<usize, u64> = HashMap::new();
    for file in acks {
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
    transfers
}
