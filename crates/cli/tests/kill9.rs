//! kill -9 of a real process: `lodestore stress` runs bank transfers from several threads and
//! is killed at a random moment, 20 times in a row on the same store. After each kill the store
//! is read with `lodestore dump --json` (which recovers it first) and checked as an outside
//! tool would: the total balance is conserved, and every acknowledged transfer is reflected in
//! the transfer counts of both its accounts.

mod common;

use common::{check_bank, lodestore, stress_on};
use rand::{Rng, SeedableRng};
use std::time::Duration;

const ACCOUNTS: usize = 50;
const ROUNDS: usize = 20;

#[test]
fn kill_minus_nine_twenty_times_loses_no_acknowledged_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    let acks = dir.path().join("acks");
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let mut last_transfers = 0;
    for round in 0..ROUNDS {
        let mut child = stress_on(&store, &acks, ACCOUNTS, 4, 30).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(150..700)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let transfers = check_bank(&store, &[&acks], ACCOUNTS, round);
        last_transfers = transfers;
    }
    assert!(
        last_transfers > 100,
        "only {last_transfers} transfers in {ROUNDS} rounds"
    );
    // Killed last, the store is sound once recovered: check says 3 until recover writes it.
    let out = lodestore()
        .args(["check", store.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = lodestore()
        .args(["recover", store.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = lodestore()
        .args(["check", store.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
