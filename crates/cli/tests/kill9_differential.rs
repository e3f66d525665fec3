//! kill -9 of `lodestore stress` on a main-memory store (differential logging, one-pass
//! restart, three log streams): 20 kills in a row on the same store, each followed by the bank
//! check an outside tool would make (`dump --json` recovers the store first): the total is
//! conserved and every acknowledged transfer is there.

mod common;

use common::{check_bank, lodestore, stress_on};
use rand::{Rng, SeedableRng};
use std::time::Duration;

const ACCOUNTS: usize = 50;
const ROUNDS: usize = 20;

#[test]
fn kill_minus_nine_twenty_times_on_a_main_memory_store_loses_no_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    let acks = dir.path().join("acks");
    let out = lodestore()
        .arg("init")
        .arg(&store)
        .args(["--method", "dl1p", "--log-streams", "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let mut last_transfers = 0;
    for round in 0..ROUNDS {
        let mut child = stress_on(&store, &acks, ACCOUNTS, 4, 30).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(150..700)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        last_transfers = check_bank(&store, &[&acks], ACCOUNTS, round);
    }
    assert!(
        last_transfers > 100,
        "only {last_transfers} transfers in {ROUNDS} rounds"
    );
    let out = lodestore()
        .args(["info", store.to_str().unwrap()])
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("dl1p"), "{info}");
}
