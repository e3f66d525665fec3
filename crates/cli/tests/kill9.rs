//! kill -9 of a real process: `lodestore stress` runs bank transfers from several threads and
//! is killed at a random moment, 20 times in a row on the same store. After each kill the store
//! is read with `lodestore dump --json` (which recovers it first) and checked as an outside
//! tool would: the total balance is conserved, and every acknowledged transfer is reflected in
//! the transfer counts of both its accounts. Once as flat transactions, once as multi-level
//! ones (`--semantic`: each transfer one operation of commuting increments in a subtransaction
//! whose end is not forced, the warm start compensating what a kill leaves unfinished).

mod common;

use common::{check_bank, lodestore, stress_on, succeed};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::Duration;

const ACCOUNTS: usize = 50;
const ROUNDS: usize = 20;

/// Runs `stress` (with `extra` arguments) on a store in `dir` and kills it, `ROUNDS` times,
/// checking the bank after each; returns the acknowledged transfers.
fn kill_rounds(dir: &Path, threads: u32, extra: &[&str], seed: u64) -> usize {
    let store = dir.join("bank");
    let acks = dir.join("acks");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut transfers = 0;
    for round in 0..ROUNDS {
        let mut child = stress_on(&store, &acks, ACCOUNTS, threads, 30)
            .args(extra)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(150..700)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        transfers = check_bank(&store, &[&acks], ACCOUNTS, round);
    }
    assert!(
        transfers > 100,
        "only {transfers} transfers in {ROUNDS} rounds"
    );
    transfers
}

fn check_exit_code(store: &Path) -> Option<i32> {
    let out = lodestore()
        .args(["check", store.to_str().unwrap()])
        .output()
        .unwrap();
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    }
    out.status.code()
}

fn recover(store: &Path) {
    succeed(&["recover", store.to_str().unwrap()]);
}

#[test]
fn kill_minus_nine_twenty_times_loses_no_acknowledged_transfer() {
    let dir = tempfile::tempdir().unwrap();
    kill_rounds(dir.path(), 4, &[], 9);
    let store = dir.path().join("bank");
    // Killed last, the store is sound once recovered: check says 3 until recover writes it.
    assert_eq!(check_exit_code(&store), Some(3));
    recover(&store);
    assert_eq!(check_exit_code(&store), Some(0));
}

/// The same on a database-cache store (`init --method s2ps`): each transfer's sphere
/// written once, at its transaction's end.
#[test]
fn kill_minus_nine_of_multi_level_transfers_on_the_database_cache_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    succeed(&["init", store.to_str().unwrap(), "--method", "s2ps"]);
    kill_rounds(dir.path(), 8, &["--semantic"], 22);
    recover(&store);
    assert_eq!(check_exit_code(&store), Some(0));
}

#[test]
fn kill_minus_nine_of_multi_level_transfers_loses_no_acknowledged_one() {
    let dir = tempfile::tempdir().unwrap();
    kill_rounds(dir.path(), 8, &["--semantic"], 21);
    let store = dir.path().join("bank");
    recover(&store);
    assert_eq!(check_exit_code(&store), Some(0));
}
