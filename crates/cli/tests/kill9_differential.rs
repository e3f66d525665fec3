//! kill -9 of `lodestore stress` on a main-memory store (differential logging, one-pass
//! restart, three log streams): 20 kills in a row on the same store, each followed by the bank
//! check an outside tool would make (`dump --json` recovers the store first): the total is
//! conserved and every acknowledged transfer is there.

mod common;

use common::{check_bank, lodestore, stress_on, succeed};
use rand::{Rng, SeedableRng};
use std::time::Duration;

const ACCOUNTS: usize = 50;
const ROUNDS: usize = 20;

#[test]
fn kill_minus_nine_twenty_times_on_a_main_memory_store_loses_no_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    let acks = dir.path().join("acks");
    let path = store.to_str().unwrap();
    succeed(&["init", path, "--method", "dl1p", "--log-streams", "3"]);
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
    // `recover` at a chosen restart level writes the recovered store and says how long the
    // restart took, split into backup load, stream reading and replay.
    let recover = || succeed(&["recover", path, "--restart-level", "2"]);
    let said = recover();
    assert!(said.starts_with("recovered "), "{said}");
    assert!(said.contains("opened and recovered in"), "{said}");
    assert!(
        said.contains("backup load") && said.contains("log read"),
        "{said}"
    );
    assert_eq!(
        check_bank(&store, &[&acks], ACCOUNTS, ROUNDS),
        last_transfers,
        "recover kept every transfer"
    );
    let said = recover();
    assert!(said.contains("closed cleanly"), "{said}");
    let out = lodestore()
        .args(["recover", path, "--restart-level", "5"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a restart level past 4 is refused"
    );
    let out = lodestore()
        .args(["info", store.to_str().unwrap()])
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(info.contains("dl1p"), "{info}");
}
