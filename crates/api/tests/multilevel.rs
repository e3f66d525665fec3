//! Multi-level transactions on the public API: semantic locks that let increments of one
//! object run at once, compensation at abort that keeps the others' increments, and the warm
//! start after crashes (including crashes during the warm start) that leaves exactly the
//! committed transactions' effects.

use lodestore::multilevel::{
    Add, Inverse, Operation, SemanticLock, SemanticMode, Strategy, APPLICATION_OPERATION_ID_MIN,
};
use lodestore::{Error, Options, Persistent, RawOid, RecoveryMethodKind, Store, Transaction};
use lodestore_storage::{Fault, SimFileSystem};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Account {
    balance: i64,
}

impl Persistent for Account {
    const TYPE_ID: u32 = 81;
}

const ACCOUNTS: usize = 6;
const OPENING: i64 = 1000;

fn options(fs: &Arc<SimFileSystem>, method: RecoveryMethodKind) -> Options {
    Options::new()
        .file_system(fs.clone())
        .page_size(4096)
        .recovery_method(method)
        .log_segment_bytes(256 << 10)
        .checkpoint_log_bytes(48 << 10)
        .lock_wait_timeout(Duration::from_millis(300))
        .background_install(false)
}

/// Accounts one to a page, so that the operations on them take different pages too.
fn open_accounts(store: &Store) -> Vec<RawOid> {
    let mut session = store.session().unwrap();
    session
        .transact(|txn| {
            let mut oids = Vec::new();
            for _ in 0..ACCOUNTS {
                let oid = txn.alloc_zeroed(Account::TYPE_ID, 3000)?;
                txn.write_at(oid, 0, &OPENING.to_le_bytes())?;
                oids.push(oid);
            }
            Ok(oids)
        })
        .unwrap()
}

fn balances(store: &Store, oids: &[RawOid]) -> Vec<i64> {
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    oids.iter()
        .map(|&oid| {
            let mut b = [0u8; 8];
            txn.read_at(oid, 0, &mut b).unwrap();
            i64::from_le_bytes(b)
        })
        .collect()
}

#[test]
fn increments_of_one_object_run_at_once_and_an_abort_keeps_the_others() {
    for method in [RecoveryMethodKind::Esm, RecoveryMethodKind::Wpl] {
        let fs = Arc::new(SimFileSystem::new());
        let store = Store::create(Path::new("/ml"), options(&fs, method)).unwrap();
        let oids = open_accounts(&store);
        let (mut s1, mut s2) = (store.session().unwrap(), store.session().unwrap());
        let mut t1 = s1.begin_multi_level().unwrap();
        let mut t2 = s2.begin_multi_level().unwrap();
        // Both hold increment locks on account 0 at once: neither waits (a wait would time
        // out after 300 ms and fail).
        assert_eq!(t1.apply(&Add::field(oids[0], 0, 5)).unwrap(), OPENING + 5);
        assert_eq!(t2.apply(&Add::field(oids[0], 0, 7)).unwrap(), OPENING + 12);
        assert_eq!(t1.apply(&Add::field(oids[1], 0, -5)).unwrap(), OPENING - 5);
        // t1 aborts: its inverses run, and t2's increment on the same field stays.
        t1.abort().unwrap();
        t2.commit().unwrap();
        let mut want = vec![OPENING; ACCOUNTS];
        want[0] += 7;
        assert_eq!(balances(&store, &oids), want, "{method}");

        // A dropped transaction compensates too.
        {
            let mut t3 = s1.begin_multi_level().unwrap();
            t3.apply(&Add::field(oids[2], 0, 100)).unwrap();
        }
        assert_eq!(balances(&store, &oids), want, "{method}: dropped");
    }
}

#[test]
fn strategy_s1_runs_the_operations_in_one_flat_transaction() {
    let fs = Arc::new(SimFileSystem::new());
    let options = options(&fs, RecoveryMethodKind::Esm).multi_level_strategy(Strategy::S1);
    let store = Store::create(Path::new("/ml"), options).unwrap();
    let oids = open_accounts(&store);
    let (mut s1, mut s2) = (store.session().unwrap(), store.session().unwrap());
    let mut t1 = s1.begin_multi_level().unwrap();
    t1.apply(&Add::field(oids[0], 0, 5)).unwrap();
    // Page locks to the end: a second transaction's increment of the same account waits,
    // and times out.
    let mut t2 = s2.begin_multi_level().unwrap();
    let err = t2.apply(&Add::field(oids[0], 0, 7)).unwrap_err();
    assert!(err.is_retryable(), "{err}");
    // The failed operation aborted t2 whole.
    assert!(matches!(
        t2.apply(&Add::field(oids[1], 0, 1)),
        Err(Error::TransactionInactive { .. })
    ));
    drop(t2);
    t1.apply(&Add::field(oids[1], 0, -5)).unwrap();
    t1.abort().unwrap();
    assert_eq!(balances(&store, &oids), vec![OPENING; ACCOUNTS]);
    let mut t3 = s1.begin_multi_level().unwrap();
    t3.apply(&Add::field(oids[2], 0, 9)).unwrap();
    t3.commit().unwrap();
    let server_stats = store.server_stats();
    assert_eq!(server_stats.subtransactions, 0, "S1 runs no subtransaction");
    assert_eq!(balances(&store, &oids)[2], OPENING + 9);
}

#[test]
fn persistence_spheres_are_counted_at_each_end() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let before = store.server_stats();
    let (mut s1, mut s2) = (store.session().unwrap(), store.session().unwrap());
    // Accounts lie one to a page (p0, p1, p2). t1 changes p0, then p1, in two
    // subtransactions; t2 then changes p1 and p2 in one, which shares p1 with t1's second:
    // their spheres merge. t2's end takes that sphere (p1, p2); t1's end finds only its
    // first subtransaction's (p0) left.
    let mut t1 = s1.begin_multi_level().unwrap();
    t1.apply(&Add::field(oids[0], 0, 1)).unwrap();
    t1.apply(&Add::field(oids[1], 0, 1)).unwrap();
    let mut t2 = s2.begin_multi_level().unwrap();
    t2.apply(&lodestore::multilevel::AddFields {
        fields: vec![(oids[1], 0, 1), (oids[2], 0, 1)],
    })
    .unwrap();
    t2.commit().unwrap();
    t1.commit().unwrap();
    let after = store.server_stats();
    assert_eq!(after.subtransactions - before.subtransactions, 3);
    assert_eq!(after.spheres - before.spheres, 2);
    assert_eq!(after.sphere_pages - before.sphere_pages, 3);
    assert_eq!(after.sphere_pages_max, 2);
}

#[test]
fn a_read_waits_for_increments_and_conflicts_end_as_retryable_errors() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let (mut s1, mut s2) = (store.session().unwrap(), store.session().unwrap());
    let mut t1 = s1.begin_multi_level().unwrap();
    t1.apply(&Add::field(oids[0], 0, 1)).unwrap();
    let mut t2 = s2.begin_multi_level().unwrap();
    // A read of the counter conflicts with the increment held until t1 ends.
    let err = t2.apply(&ReadBalance { account: oids[0] }).unwrap_err();
    assert!(err.is_retryable(), "{err}");
    t2.abort().unwrap();
    t1.commit().unwrap();
    let mut t2 = s2.begin_multi_level().unwrap();
    assert_eq!(
        t2.apply(&ReadBalance { account: oids[0] }).unwrap(),
        OPENING + 1
    );
    t2.commit().unwrap();
}

/// An application's operation: reads a balance under a shared semantic lock.
#[derive(Serialize, Deserialize)]
struct ReadBalance {
    account: RawOid,
}

impl Operation for ReadBalance {
    const ID: u32 = APPLICATION_OPERATION_ID_MIN + 1;
    const NAME: &'static str = "read balance";
    type Output = i64;

    fn locks(&self) -> Vec<SemanticLock> {
        vec![SemanticLock {
            object: self.account,
            mode: SemanticMode::Read,
        }]
    }

    fn run(&self, txn: &mut Transaction<'_>) -> lodestore::Result<(i64, Option<Inverse>)> {
        let mut b = [0u8; 8];
        txn.read_at(self.account, 0, &mut b)?;
        Ok((i64::from_le_bytes(b), None))
    }
}

/// An application's operation whose inverse is itself: flips the sign of a balance.
#[derive(Serialize, Deserialize)]
struct Negate {
    account: RawOid,
}

impl Operation for Negate {
    const ID: u32 = APPLICATION_OPERATION_ID_MIN + 2;
    const NAME: &'static str = "negate";
    type Output = ();

    fn locks(&self) -> Vec<SemanticLock> {
        vec![SemanticLock {
            object: self.account,
            mode: SemanticMode::Write,
        }]
    }

    fn run(&self, txn: &mut Transaction<'_>) -> lodestore::Result<((), Option<Inverse>)> {
        let mut b = [0u8; 8];
        txn.read_at(self.account, 0, &mut b)?;
        txn.write_at(self.account, 0, &(-i64::from_le_bytes(b)).to_le_bytes())?;
        Ok(((), Some(Inverse::of(self)?)))
    }
}

#[test]
fn operations_are_registered_by_id_and_an_unknown_one_stops_the_warm_start() {
    assert!(Options::new().operation::<Negate>().is_ok());
    let err = Options::new()
        .operation::<Negate>()
        .unwrap()
        .operation::<Negate>()
        .unwrap_err();
    assert!(err.to_string().contains("already"), "{err}");

    let fs = Arc::new(SimFileSystem::new());
    let registered = options(&fs, RecoveryMethodKind::Esm)
        .operation::<Negate>()
        .unwrap();
    let store = Store::create(Path::new("/ml"), registered.clone()).unwrap();
    let oids = open_accounts(&store);
    let mut session = store.session().unwrap();
    // S2: the subtransaction's end is forced, so the crash below keeps it.
    let mut txn = session.begin_multi_level_with(Strategy::S2).unwrap();
    txn.apply(&Negate { account: oids[3] }).unwrap();
    // Crash with the transaction unfinished: its negation is durable (the subtransaction
    // committed), its end is not.
    fs.crash_now();
    std::mem::forget(txn);
    drop(session);
    drop(store);
    fs.recover(Fault::DropUnsynced, 1);
    let err = match Store::open(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)) {
        Err(e) => e,
        Ok(_) => panic!("a warm start ran an operation it does not know"),
    };
    match &err {
        Error::UnknownOperation { id, txn, lsn, log } => {
            assert_eq!(*id, Negate::ID);
            assert!(*txn > 0 && *lsn > 0, "{err}");
            assert!(log.ends_with("log"), "{err}");
        }
        other => panic!("wanted UnknownOperation, got {other}"),
    }
    // Registered, the warm start undoes the negation.
    let store = Store::open(Path::new("/ml"), registered).unwrap();
    assert_eq!(balances(&store, &oids), vec![OPENING; ACCOUNTS]);
}

/// What the campaign asks of a session's worker thread.
enum Step {
    /// Move `amount` from one account to another: two increments, two subtransactions.
    Transfer {
        from: usize,
        to: usize,
        amount: i64,
    },
    Commit,
    Abort,
}

/// A session on a thread of its own running one multi-level transaction after another, one
/// step at a time as the campaign asks (so the interleaving is the seed's, every time).
/// Answers each step with the transaction's changes so far, or the error.
fn worker(
    store: Arc<Store>,
    strategy: Strategy,
    oids: Vec<RawOid>,
    steps: std::sync::mpsc::Receiver<Step>,
    answers: std::sync::mpsc::Sender<lodestore::Result<Vec<i64>>>,
) {
    let mut session = store.session().unwrap();
    'transactions: loop {
        // A transaction begins at its first step: every call to the store happens inside a
        // step, so the interleaving (and every I/O) is the seed's alone.
        let Ok(mut step) = steps.recv() else {
            return;
        };
        let mut txn = match session.begin_multi_level_with(strategy) {
            Ok(txn) => txn,
            Err(e) => {
                let _ = answers.send(Err(e));
                return;
            }
        };
        let mut delta = vec![0i64; ACCOUNTS];
        loop {
            let answer = match step {
                Step::Transfer { from, to, amount } => {
                    let done = txn
                        .apply(&Add::field(oids[from], 0, -amount))
                        .map(|_| delta[from] -= amount)
                        .and_then(|()| txn.apply(&Add::field(oids[to], 0, amount)))
                        .map(|_| delta[to] += amount);
                    match done {
                        Ok(()) => Ok(delta.clone()),
                        // A lock conflict with another worker's transaction (S1 holds page
                        // locks to the end): this one aborts, and the slot begins anew.
                        Err(e) if e.is_retryable() => {
                            let aborted = txn.abort().map(|()| vec![0; ACCOUNTS]);
                            let _ = answers.send(aborted);
                            continue 'transactions;
                        }
                        Err(e) => Err(e),
                    }
                }
                Step::Commit => {
                    let done = txn.commit().map(|_| delta.clone());
                    let _ = answers.send(done);
                    continue 'transactions;
                }
                Step::Abort => {
                    let done = txn.abort().map(|()| vec![0; ACCOUNTS]);
                    let _ = answers.send(done);
                    continue 'transactions;
                }
            };
            let _ = answers.send(answer);
            step = match steps.recv() {
                Ok(step) => step,
                Err(_) => return,
            };
        }
    }
}

/// One run of the crash campaign: transfers in multi-level transactions of three sessions,
/// interleaved by `seed`, with a crash at the `crash_at`-th file operation; then a reopen
/// (its warm start crashed too when `crash_in_warm_start`), and the balances must be those
/// of the committed transfers (and of the one whose commit the crash interrupted, or not).
/// Returns whether the run reached the crash point.
fn crash_run(
    method: RecoveryMethodKind,
    strategy: Strategy,
    seed: u64,
    crash_at: u64,
    crash_in_warm_start: bool,
) -> bool {
    let fs = Arc::new(SimFileSystem::new());
    let store = Arc::new(Store::create(Path::new("/ml"), options(&fs, method)).unwrap());
    let oids = open_accounts(&store);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut expected = vec![OPENING; ACCOUNTS];
    let mut in_doubt: Option<Vec<i64>> = None;
    fs.arm(crash_at);
    let mut workers = Vec::new();
    for _ in 0..3 {
        let (step_tx, step_rx) = std::sync::mpsc::channel();
        let (answer_tx, answer_rx) = std::sync::mpsc::channel();
        let (store, oids) = (store.clone(), oids.clone());
        let thread = std::thread::spawn(move || worker(store, strategy, oids, step_rx, answer_tx));
        workers.push((step_tx, answer_rx, thread));
    }
    // Each worker's transaction's changes so far.
    let mut current = vec![vec![0i64; ACCOUNTS]; workers.len()];
    for _ in 0..40 {
        let w = rng.random_range(0..workers.len());
        let (steps, answers, _) = &workers[w];
        let step = match rng.random_range(0..10) {
            0..=6 => Step::Transfer {
                from: rng.random_range(0..ACCOUNTS),
                to: rng.random_range(0..ACCOUNTS),
                amount: rng.random_range(1..50),
            },
            7 | 8 => Step::Commit,
            _ => Step::Abort,
        };
        let committing = matches!(step, Step::Commit);
        if steps.send(step).is_err() {
            break;
        }
        match answers.recv() {
            Ok(Ok(delta)) => {
                if committing {
                    for (e, d) in expected.iter_mut().zip(&delta) {
                        *e += d;
                    }
                    current[w] = vec![0; ACCOUNTS];
                } else {
                    current[w] = delta;
                }
            }
            Ok(Err(_)) | Err(_) => {
                // The crash (or what it left): a commit cut short may or may not count.
                if committing {
                    in_doubt = Some(current[w].clone());
                }
                break;
            }
        }
    }
    let reached = fs.has_crashed();
    fs.crash_now();
    // The workers end (their unfinished transactions' compensations fail on the crashed file
    // system, left to the warm start) before the files are resolved.
    for (steps, _, thread) in workers {
        drop(steps);
        thread.join().unwrap();
    }
    drop(store);
    fs.recover(Fault::KeepPrefix, seed);
    if crash_in_warm_start {
        fs.arm(1 + seed % 40);
        let reopened = Store::open(Path::new("/ml"), options(&fs, method));
        fs.crash_now();
        drop(reopened);
        fs.recover(Fault::DropUnsynced, seed);
    }
    fs.disarm();
    let store = Store::open(Path::new("/ml"), options(&fs, method)).unwrap_or_else(|e| {
        panic!("{method} {strategy} seed {seed} crash at {crash_at}: reopen: {e}")
    });
    let found = balances(&store, &oids);
    assert_eq!(
        found.iter().sum::<i64>(),
        OPENING * ACCOUNTS as i64,
        "{method} {strategy} seed {seed} crash at {crash_at}: money appeared or vanished: {found:?}"
    );
    // A commit the crash cut short is in doubt: its transfers count entirely or not at all.
    let with_doubtful = in_doubt.map(|delta| {
        expected
            .iter()
            .zip(&delta)
            .map(|(e, d)| e + d)
            .collect::<Vec<_>>()
    });
    assert!(
        found == expected || Some(&found) == with_doubtful.as_ref(),
        "{method} {strategy} seed {seed} crash at {crash_at} (warm start crashed: {crash_in_warm_start}): \
         balances {found:?}, committed {expected:?}, with the one in doubt {with_doubtful:?}"
    );
    reached
}

#[test]
fn crashes_anywhere_and_during_the_warm_start_leave_exactly_the_committed_transfers() {
    let cases = [
        (RecoveryMethodKind::Esm, Strategy::S2Ps),
        (RecoveryMethodKind::Esm, Strategy::S2),
        (RecoveryMethodKind::Wpl, Strategy::S2Ps),
    ];
    for (method, strategy) in cases {
        let mut runs = 0;
        for seed in 0..3u64 {
            let mut crash_at = 1;
            loop {
                let reached = crash_run(method, strategy, seed, crash_at, seed % 2 == 1);
                runs += 1;
                if !reached {
                    break;
                }
                crash_at += 1;
            }
        }
        // Each seed's workload passes dozens of crash points before it runs to its end.
        assert!(runs > 80, "{method} {strategy}: {runs} runs");
    }
}
