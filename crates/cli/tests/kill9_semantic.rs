//! kill -9 of `lodestore stress --semantic`: each transfer a multi-level transaction (one
//! operation of commuting increments in a subtransaction whose end is not forced, under
//! increment locks), killed at a random moment 20 times in a row on the same store. After each
//! kill `lodestore dump --json` recovers the store (its warm start compensating the
//! transactions the kill left unfinished) and the bank is checked as an outside tool would:
//! the total is conserved and every acknowledged transfer shows in both accounts' counts.

mod common;

use common::{check_bank, lodestore, stress_on};
use rand::{Rng, SeedableRng};
use std::time::Duration;

const ACCOUNTS: usize = 50;
const ROUNDS: usize = 20;

#[test]
fn kill_minus_nine_of_multi_level_transfers_loses_no_acknowledged_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    let acks = dir.path().join("acks");
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let mut transfers = 0;
    for round in 0..ROUNDS {
        let mut child = stress_on(&store, &acks, ACCOUNTS, 8, 30)
            .arg("--semantic")
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
    // Recovered and closed once, the store checks sound.
    let out = lodestore()
        .args(["recover", store.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
