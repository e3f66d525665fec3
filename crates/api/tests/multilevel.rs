//! Multi-level transactions on the public API: semantic locks that let increments of one
//! object run at once, compensation at abort that keeps the others' increments, strategies,
//! persistence spheres, registered operations and a warm start that refuses an unknown one.
//! The crash campaigns are `lodestore-torture`'s (`multilevel.rs`, `tests/campaign.rs`).

use lodestore::multilevel::{
    Add, AddFields, Inverse, Operation, SemanticLock, SemanticMode, Strategy,
    APPLICATION_OPERATION_ID_MIN,
};
use lodestore::{Error, Options, Persistent, RawOid, RecoveryMethodKind, Store, Transaction};
use lodestore_storage::{Fault, SimFileSystem};
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
    for method in [
        RecoveryMethodKind::Esm,
        RecoveryMethodKind::Wpl,
        RecoveryMethodKind::Dbcache,
    ] {
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
    t2.apply(&AddFields {
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
    // Taking the maximum starts a new period.
    assert_eq!(store.take_sphere_pages_max(), Some(2));
    assert_eq!(store.take_sphere_pages_max(), Some(0));
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

#[test]
fn an_operation_holds_every_object_it_locks_to_the_end() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let (mut s1, mut s2) = (store.session().unwrap(), store.session().unwrap());
    let mut t1 = s1.begin_multi_level().unwrap();
    // One operation, one request for both its locks.
    t1.apply(&AddFields {
        fields: vec![(oids[0], 0, -5), (oids[1], 0, 5)],
    })
    .unwrap();
    let mut t2 = s2.begin_multi_level().unwrap();
    for &account in &oids[..2] {
        let err = t2.apply(&ReadBalance { account }).unwrap_err();
        assert!(err.is_retryable(), "{err}");
    }
    // The other accounts are free.
    assert_eq!(
        t2.apply(&ReadBalance { account: oids[2] }).unwrap(),
        OPENING
    );
    t2.abort().unwrap();
    t1.commit().unwrap();
    let mut t2 = s2.begin_multi_level().unwrap();
    assert_eq!(
        t2.apply(&ReadBalance { account: oids[1] }).unwrap(),
        OPENING + 5
    );
    t2.commit().unwrap();
    assert_eq!(balances(&store, &oids[..2]), vec![OPENING - 5, OPENING + 5]);
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

/// At the page server: a level-1 transaction's pages are changed by its subtransactions only,
/// so one that changed pages itself cannot begin one, and one with subtransactions cannot
/// ship pages or free them itself (its changes would end with an L1 end record, which no
/// page-level restart reads as a commit).
#[test]
fn a_level_one_transaction_changes_pages_only_through_its_subtransactions() {
    use lodestore_server::{PageServer, Server, ServerOptions, TxnKind};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::create(
        Arc::new(lodestore_storage::RealFileSystem),
        &dir.path().join("s"),
        4096,
        ServerOptions::default(),
    )
    .unwrap();
    // Changed pages first: no subtransaction.
    let flat = server.begin().unwrap();
    let page = server.allocate_pages(flat, 1).unwrap()[0].first;
    let err = server
        .begin_transaction(TxnKind::Sub { parent: flat })
        .unwrap_err();
    assert!(err.to_string().contains("changed pages itself"), "{err}");
    server.abort(flat).unwrap();
    // A parent: no pages of its own.
    let parent = server.begin().unwrap();
    let sub = server.begin_transaction(TxnKind::Sub { parent }).unwrap();
    server.commit(sub).unwrap();
    let err = server.free_pages(parent, &[page]).unwrap_err();
    assert!(err.to_string().contains("changed by them"), "{err}");
    server.commit(parent).unwrap();
}

/// The complex-object operation: reads share a subobject, a write excludes others from it
/// until the end of the transaction, and an abort writes back exactly what the writes
/// replaced, newest first (a subobject written twice gets its first value back).
#[test]
fn a_change_reads_and_writes_subobjects_and_its_compensation_restores_them() {
    use lodestore::multilevel::{Change, ChangeStep};
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let write = |object: RawOid, value: i64| ChangeStep::Write {
        object,
        offset: 0,
        bytes: value.to_le_bytes().to_vec(),
    };
    let change = Change {
        steps: vec![
            ChangeStep::Read(oids[0]),
            write(oids[1], 7),
            write(oids[1], 8),
            ChangeStep::Read(oids[1]),
        ],
    };
    assert_eq!(
        change.locks(),
        vec![
            SemanticLock {
                object: oids[0],
                mode: SemanticMode::Read
            },
            SemanticLock {
                object: oids[1],
                mode: SemanticMode::Write
            },
        ]
    );
    let (mut s1, mut s2) = (store.session().unwrap(), store.session().unwrap());
    let mut t1 = s1.begin_multi_level().unwrap();
    let read_only = t1.apply(&change).unwrap();
    // A second transaction may read object 0 at once, but not object 1 (t1 wrote it): the
    // semantic lock outlives the subtransaction's page locks.
    let mut t2 = s2.begin_multi_level().unwrap();
    let sum = t2
        .apply(&Change {
            steps: vec![ChangeStep::Read(oids[0])],
        })
        .unwrap();
    assert_ne!(sum, read_only, "the two changes read different bytes");
    let Err(e) = t2.apply(&Change {
        steps: vec![ChangeStep::Read(oids[1])],
    }) else {
        panic!("read a subobject another transaction had written")
    };
    assert!(e.is_retryable(), "{e}");
    t2.abort().unwrap();
    // The subtransaction committed its write (a flat reader takes no semantic locks).
    assert_eq!(balances(&store, &oids)[..2], [OPENING, 8]);
    t1.abort().unwrap();
    assert_eq!(balances(&store, &oids), vec![OPENING; ACCOUNTS]);
}

/// The strategy given at creation is recorded in the store: a later open without one runs
/// it, an open with another records that one, and `info` names it.
#[test]
fn the_store_records_its_strategy() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/ml");
    let store = Store::create(
        path,
        options(&fs, RecoveryMethodKind::Esm).multi_level_strategy(Strategy::S1),
    )
    .unwrap();
    assert_eq!(store.multi_level_strategy(), Strategy::S1);
    drop(store);
    let store = Store::open(path, options(&fs, RecoveryMethodKind::Esm)).unwrap();
    assert_eq!(store.multi_level_strategy(), Strategy::S1);
    drop(store);
    let info = lodestore::info(fs.as_ref(), path).unwrap();
    assert_eq!(info.multi_level_strategy, "s1");
    let store = Store::open(
        path,
        options(&fs, RecoveryMethodKind::Esm).multi_level_strategy(Strategy::S2),
    )
    .unwrap();
    drop(store);
    let store = Store::open(path, options(&fs, RecoveryMethodKind::Esm)).unwrap();
    assert_eq!(store.multi_level_strategy(), Strategy::S2);
    drop(store);

    // A store never given one runs the default, and says so.
    let other = Path::new("/plain");
    drop(Store::create(other, options(&fs, RecoveryMethodKind::Esm)).unwrap());
    let store = Store::open(other, options(&fs, RecoveryMethodKind::Esm)).unwrap();
    assert_eq!(store.multi_level_strategy(), Strategy::S2Ps);
    drop(store);
    let info = lodestore::info(fs.as_ref(), other).unwrap();
    assert_eq!(info.multi_level_strategy, "default s2ps");
}

/// A crash with a multi-level transaction unfinished: the log summary `info` shows counts its
/// undo records and lists it for the warm start; `check` finds nothing wrong.
#[test]
fn the_log_summary_lists_an_unfinished_level_one_transaction() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/ml");
    let store = Store::create(path, options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let mut session = store.session().unwrap();
    let mut done = session.begin_multi_level_with(Strategy::S2).unwrap();
    done.apply(&Add::field(oids[0], 0, 1)).unwrap();
    done.commit().unwrap();
    let mut open = session.begin_multi_level_with(Strategy::S2).unwrap();
    open.apply(&Add::field(oids[1], 0, 2)).unwrap();
    open.apply(&Add::field(oids[2], 0, 3)).unwrap();
    fs.crash_now();
    std::mem::forget(open);
    drop(session);
    drop(store);
    fs.recover(Fault::DropUnsynced, 1);
    let summary = lodestore::log_summary(fs.as_ref(), path).unwrap().unwrap();
    assert_eq!(summary.undo_records, 3, "{summary:?}");
    assert_eq!(summary.ends_committed, 1, "{summary:?}");
    assert_eq!(summary.unfinished, 1, "{summary:?}");
    assert!(summary.problems.is_empty(), "{:?}", summary.problems);
    assert!(lodestore::check(fs.as_ref(), path).unwrap().is_sound());
    // The warm start compensates it, after which the log has nothing unfinished.
    let store = Store::open(path, options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let mut want = vec![OPENING; ACCOUNTS];
    want[0] += 1;
    assert_eq!(balances(&store, &oids), want);
    drop(store);
    let summary = lodestore::log_summary(fs.as_ref(), path).unwrap().unwrap();
    assert_eq!(summary.unfinished, 0, "{summary:?}");
}

/// The database-cache method (`dbcache`): under S2/PS a transaction's pages reach the log once,
/// as one atomic write of its persistence sphere at its end (EOT); under S2 each
/// subtransaction's end writes its own; a crash before the end loses the deferred changes and
/// the warm start compensates only what was written.
#[test]
fn dbcache_writes_the_sphere_once_at_the_end_and_s2_at_every_subtransaction() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/ml");
    let store = Store::create(path, options(&fs, RecoveryMethodKind::Dbcache)).unwrap();
    let oids = open_accounts(&store);
    let mut session = store.session().unwrap();

    let before = store.server_stats();
    let mut txn = session.begin_multi_level_with(Strategy::S2Ps).unwrap();
    for oid in &oids[..3] {
        txn.apply(&Add::field(*oid, 0, 1)).unwrap();
    }
    // Nothing of it is logged yet: three subtransactions ended, their pages in the pool.
    assert_eq!(
        store.server_stats().after_image_writes,
        before.after_image_writes
    );
    txn.commit().unwrap();
    let after = store.server_stats();
    assert_eq!(after.after_image_writes - before.after_image_writes, 1);
    assert_eq!(after.after_images_written - before.after_images_written, 3);

    let before = after;
    let mut txn = session.begin_multi_level_with(Strategy::S2).unwrap();
    for oid in &oids[3..5] {
        txn.apply(&Add::field(*oid, 0, 1)).unwrap();
    }
    txn.commit().unwrap();
    let after = store.server_stats();
    // One write per subtransaction's end, then the end's (no page left: EOT only).
    assert_eq!(after.after_image_writes - before.after_image_writes, 3);
    assert_eq!(after.after_images_written - before.after_images_written, 2);

    // S2/PS, crashed before the end: the deferred changes never reached the log, and the
    // warm start has nothing to compensate. An S2 transaction crashed after one forced end
    // has that one compensated.
    let mut lost = session.begin_multi_level_with(Strategy::S2Ps).unwrap();
    lost.apply(&Add::field(oids[0], 0, 100)).unwrap();
    let mut other = store.session().unwrap();
    let mut forced = other.begin_multi_level_with(Strategy::S2).unwrap();
    forced.apply(&Add::field(oids[5], 0, 100)).unwrap();
    fs.crash_now();
    std::mem::forget(lost);
    std::mem::forget(forced);
    drop(session);
    drop(other);
    drop(store);
    fs.recover(Fault::DropUnsynced, 3);
    let store = Store::open(path, options(&fs, RecoveryMethodKind::Dbcache)).unwrap();
    let mut want = vec![OPENING; ACCOUNTS];
    for w in &mut want[..5] {
        *w += 1;
    }
    assert_eq!(balances(&store, &oids), want);
    drop(store);
    assert!(lodestore::check(fs.as_ref(), path).unwrap().is_sound());
}

/// No steal: a transaction changes at most what the server pool holds, and one that needs
/// more is refused with an error naming the pool; pages of ended subtransactions leave the
/// pool by forcing their sphere's write.
#[test]
fn dbcache_pins_a_running_transactions_pages_and_evicting_a_sphere_page_writes_it() {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/ml");
    // The accounts are made in one transaction of six pages: in a pool large enough.
    let store = Store::create(path, options(&fs, RecoveryMethodKind::Dbcache)).unwrap();
    let oids = open_accounts(&store);
    drop(store);
    let store = Store::open(
        path,
        options(&fs, RecoveryMethodKind::Dbcache).server_pool_bytes(4 * 4096),
    )
    .unwrap();
    let mut session = store.session().unwrap();
    let before = store.server_stats();
    let mut txn = session.begin_multi_level_with(Strategy::S2Ps).unwrap();
    for oid in &oids {
        txn.apply(&Add::field(*oid, 0, 2)).unwrap();
    }
    txn.commit().unwrap();
    let after = store.server_stats();
    assert!(
        after.spheres_forced_by_eviction > before.spheres_forced_by_eviction,
        "{after:?}"
    );
    assert_eq!(balances(&store, &oids), vec![OPENING + 2; ACCOUNTS]);

    // One flat transaction changing every account page at once cannot fit four frames.
    let err = session
        .transact(|t| {
            for oid in &oids {
                t.write_at(*oid, 0, &0i64.to_le_bytes())?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("server pool"), "{err}");
    assert_eq!(balances(&store, &oids), vec![OPENING + 2; ACCOUNTS]);
}

/// A store that keeps snapshots cannot use dbcache: a committed page may wait unlogged.
#[test]
fn dbcache_refuses_snapshots() {
    let fs = Arc::new(SimFileSystem::new());
    let err = match Store::create(
        Path::new("/ml"),
        options(&fs, RecoveryMethodKind::Dbcache).snapshots(true),
    ) {
        Err(e) => e,
        Ok(_) => panic!("dbcache kept snapshots"),
    };
    assert!(err.to_string().contains("dbcache"), "{err}");
}

/// The paper's remedy for large spheres: with `sphere_write_pages`, a sphere that reaches that
/// many pages at a subtransaction's end is written then, and the transaction's end writes
/// only what is left.
#[test]
fn dbcache_writes_a_sphere_early_once_it_reaches_the_limit() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(
        Path::new("/ml"),
        options(&fs, RecoveryMethodKind::Dbcache).sphere_write_pages(2),
    )
    .unwrap();
    let oids = open_accounts(&store);
    let mut session = store.session().unwrap();
    let before = store.server_stats();
    let mut txn = session.begin_multi_level_with(Strategy::S2Ps).unwrap();
    // One page: below the limit, it waits. Two pages in one subtransaction: written at once.
    txn.apply(&Add::field(oids[0], 0, 1)).unwrap();
    assert_eq!(
        store.server_stats().spheres_written_early,
        before.spheres_written_early
    );
    txn.apply(&AddFields {
        fields: vec![(oids[1], 0, 1), (oids[2], 0, -1)],
    })
    .unwrap();
    let mid = store.server_stats();
    assert_eq!(mid.spheres_written_early - before.spheres_written_early, 1);
    assert_eq!(mid.after_images_written - before.after_images_written, 2);
    txn.commit().unwrap();
    let after = store.server_stats();
    // The end writes the page left (account 0's).
    assert_eq!(after.after_images_written - mid.after_images_written, 1);
    let mut want = vec![OPENING; ACCOUNTS];
    want[0] += 1;
    want[1] += 1;
    want[2] -= 1;
    assert_eq!(balances(&store, &oids), want);
}

/// Increments of small objects run at the page server (`Operation::increments`): the
/// session's cache takes no lock and fetches no page, the values are those the client path
/// gives, and an S2 increment a crash leaves in a loser is compensated by the warm start.
#[test]
fn increments_run_at_the_server_without_the_client_cache() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let mut session = store.session().unwrap();
    for (round, strategy) in [Strategy::S2Ps, Strategy::S2].into_iter().enumerate() {
        let second = OPENING + 7 * round as i64;
        let (client, server) = (session.stats(), store.server_stats());
        let mut txn = session.begin_multi_level_with(strategy).unwrap();
        assert_eq!(txn.apply(&Add::field(oids[0], 0, 5)).unwrap(), OPENING + 5);
        let transfer = AddFields {
            fields: vec![(oids[0], 0, -5), (oids[1], 0, 5), (oids[1], 0, 2)],
        };
        assert_eq!(
            txn.apply(&transfer).unwrap(),
            vec![OPENING, second + 5, second + 7]
        );
        txn.commit().unwrap();
        let after = session.stats();
        assert_eq!(after.lock_requests, client.lock_requests, "{strategy}");
        assert_eq!(after.pages_fetched, client.pages_fetched, "{strategy}");
        assert_eq!(
            store.server_stats().subtransactions - server.subtransactions,
            2
        );
    }
    // The client path (an operation without `increments`) sees what the server wrote.
    let mut txn = session.begin_multi_level().unwrap();
    assert_eq!(
        txn.apply(&ClientAdd(Add::field(oids[1], 0, 1))).unwrap(),
        OPENING + 15
    );
    txn.abort().unwrap();
    let mut want = vec![OPENING; ACCOUNTS];
    want[1] += 14;
    assert_eq!(balances(&store, &oids), want);

    // S2: the subtransaction's end is forced, so a crash keeps the increment of a loser,
    // and the warm start runs its inverse.
    let mut txn = session.begin_multi_level_with(Strategy::S2).unwrap();
    txn.apply(&Add::field(oids[2], 0, 40)).unwrap();
    fs.crash_now();
    std::mem::forget(txn);
    drop(session);
    drop(store);
    fs.recover(Fault::DropUnsynced, 2);
    let store = Store::open(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    assert_eq!(balances(&store, &oids), want);
}

/// Under S2/PS, increments at the server take and release their page locks inside one hold
/// of the server's state, so concurrent ones on the same pages never wait for each other's
/// page locks (a release after the hold would leave the lock held while the next one looks).
#[test]
fn increments_at_the_server_never_wait_for_each_others_page_locks() {
    const THREADS: usize = 4;
    const TRANSFERS: usize = 150;
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    // Every account's page in the pool first: a page outside it takes the client's steps.
    let mut session = store.session().unwrap();
    let mut txn = session.begin_multi_level().unwrap();
    for &oid in &oids {
        txn.apply(&Add::field(oid, 0, 0)).unwrap();
    }
    txn.commit().unwrap();
    let (locks, server) = (store.lock_stats(), store.server_stats());
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (store, oids) = (&store, &oids);
            scope.spawn(move || {
                let mut session = store.session().unwrap();
                for i in 0..TRANSFERS {
                    let (from, to) = (oids[(t + i) % 2], oids[(t + i + 1) % 2]);
                    let mut txn = session.begin_multi_level().unwrap();
                    let op = AddFields {
                        fields: vec![(from, 0, -3), (to, 0, 3), (oids[2], 0, 1)],
                    };
                    txn.apply(&op).unwrap();
                    txn.commit().unwrap();
                }
            });
        }
    });
    assert_eq!(store.lock_stats().waits - locks.waits, 0);
    assert_eq!(
        store.server_stats().subtransactions - server.subtransactions,
        (THREADS * TRANSFERS) as u64
    );
    let got = balances(&store, &oids);
    assert_eq!(got[0] + got[1], 2 * OPENING);
    assert_eq!(got[2], OPENING + (THREADS * TRANSFERS) as i64);
}

/// [`Add`] without its `increments`: runs in the client cache.
#[derive(Serialize, Deserialize)]
struct ClientAdd(Add);

impl Operation for ClientAdd {
    const ID: u32 = APPLICATION_OPERATION_ID_MIN + 7;
    const NAME: &'static str = "add in the client";
    type Output = i64;

    fn locks(&self) -> Vec<SemanticLock> {
        self.0.locks()
    }

    fn run(&self, txn: &mut Transaction<'_>) -> lodestore::Result<(i64, Option<Inverse>)> {
        self.0.run(txn)
    }
}

/// Bad increments at the server: each refused with a clear error, nothing of it applied, and
/// the transaction usable; an increment of a large object goes to the client path, which
/// refuses it.
#[test]
fn bad_increments_at_the_server_leave_nothing_and_the_transaction_goes_on() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let mut session = store.session().unwrap();
    let large = session
        .transact(|txn| txn.alloc_zeroed(Account::TYPE_ID, 20_000))
        .unwrap();
    let missing = RawOid(oids[0].0 + 40);
    let mut txn = session.begin_multi_level().unwrap();
    // Each first changes a good field, then fails: the good change must not stay.
    let bad = [
        (oids[1], 2996, 1, "outside its 3000 bytes"),
        (oids[1], 0, i64::MAX, "overflows"),
        (missing, 0, 1, "does not exist"),
        (large, 0, 1, "large"),
    ];
    for (object, offset, delta, what) in bad {
        let op = AddFields {
            fields: vec![(oids[0], 0, 3), (object, offset, delta)],
        };
        let err = txn.apply(&op).unwrap_err();
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    let err = txn.apply(&Add::field(oids[0], 0, i64::MIN)).unwrap_err();
    assert!(err.to_string().contains("cannot be undone"), "{err}");
    assert_eq!(txn.apply(&Add::field(oids[0], 0, 9)).unwrap(), OPENING + 9);
    txn.commit().unwrap();
    let mut want = vec![OPENING; ACCOUNTS];
    want[0] += 9;
    assert_eq!(balances(&store, &oids), want);
}

/// Increments at the server behind a flat transaction's page lock: they wait for it, then
/// add to what that transaction committed.
#[test]
fn increments_at_the_server_wait_for_a_page_lock_and_see_the_commit_behind_it() {
    let fs = Arc::new(SimFileSystem::new());
    let store = Store::create(Path::new("/ml"), options(&fs, RecoveryMethodKind::Esm)).unwrap();
    let oids = open_accounts(&store);
    let mut flat_session = store.session().unwrap();
    let mut flat = flat_session.begin().unwrap();
    flat.write_at(oids[3], 0, &500i64.to_le_bytes()).unwrap();
    let added = std::thread::scope(|scope| {
        let adder = scope.spawn(|| {
            let mut session = store.session().unwrap();
            let mut txn = session.begin_multi_level().unwrap();
            let now = txn.apply(&Add::field(oids[3], 0, 5)).unwrap();
            txn.commit().unwrap();
            now
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !adder.is_finished(),
            "the increment did not wait for the page lock"
        );
        flat.commit().unwrap();
        adder.join().unwrap()
    });
    assert_eq!(added, 505);
    assert_eq!(balances(&store, &oids)[3], 505);
}
