//! `info` and `check` read the server's log as a crash left it: level-1 records are counted by
//! kind, transactions with records and no end are listed for the warm start, and a level-1
//! record that does not decode, or whose chain points where its transaction has no record, is
//! a problem naming the log, the offset and the transaction.

use lodestore_core::{Lsn, TxnId};
use lodestore_multilevel::kinds::OPERATION_UNDO;
use lodestore_multilevel::records::{Chain, OperationId, TransactionEnd, UndoRecord};
use lodestore_server::{log_inspect, Server, ServerOptions};
use lodestore_storage::{Fault, OpenMode, SimFileSystem, Volume};
use lodestore_wal::FamilyRef;
use std::path::Path;
use std::sync::Arc;

fn undo(txn: u64, prev: Lsn, sub: u64) -> UndoRecord<'static> {
    UndoRecord {
        chain: Chain {
            txn: TxnId(txn),
            prev,
        },
        sub: TxnId(sub),
        inverse: OperationId(1),
        args: b"arguments",
    }
}

#[test]
fn both_levels_are_counted_and_damage_is_named_with_offset_and_transaction() {
    let fs = Arc::new(SimFileSystem::new());
    let dir = Path::new("/s");
    let server = Server::create(fs.clone(), dir, 4096, ServerOptions::default()).unwrap();
    let log = server.log();
    // Transaction 100: two undo records and a committed end. Transaction 200: one undo
    // record, no end (unfinished). Transaction 300: an undo record whose previous record is
    // said to be at an LSN where 300 has none. Then a record too short to decode.
    let first = log
        .append(None, Lsn::ZERO, &undo(100, Lsn::ZERO, 101))
        .unwrap();
    let second = log.append(None, Lsn::ZERO, &undo(100, first, 102)).unwrap();
    log.append(
        None,
        Lsn::ZERO,
        &TransactionEnd {
            chain: Chain {
                txn: TxnId(100),
                prev: second,
            },
            committed: true,
        },
    )
    .unwrap();
    log.append(None, Lsn::ZERO, &undo(200, Lsn::ZERO, 201))
        .unwrap();
    let stray = log.append(None, Lsn::ZERO, &undo(300, first, 301)).unwrap();
    let short = log
        .append(
            None,
            Lsn::ZERO,
            &FamilyRef::new(OPERATION_UNDO, 0, &[7u8; 10]).unwrap(),
        )
        .unwrap();
    log.flush_all().unwrap();
    fs.crash_now();
    drop(server);
    fs.recover(Fault::DropUnsynced, 1);

    let volume = Volume::open(fs.as_ref(), dir, None, OpenMode::ReadOnly).unwrap();
    let summary = log_inspect::log_summary(fs.as_ref(), dir, &volume).unwrap();
    assert_eq!(summary.undo_records, 4, "{summary:?}");
    assert_eq!(summary.ends_committed, 1);
    assert_eq!(summary.ends_aborted, 0);
    assert_eq!(summary.unfinished, 2, "{summary:?}");
    assert_eq!(summary.unfinished_ids, vec![200, 300]);
    assert_eq!(summary.problems.len(), 2, "{:?}", summary.problems);
    let chain = &summary.problems[0];
    assert!(
        chain.contains(&format!("offset {stray}")) && chain.contains("transaction 300"),
        "{chain}"
    );
    assert!(chain.contains("/s/log"), "{chain}");
    let decode = &summary.problems[1];
    assert!(
        decode.contains(&format!("offset {short}")) && decode.contains("undo record of 10 bytes"),
        "{decode}"
    );

    // `check` reports the same two, as problems of the store.
    let report = lodestore_server::check::check(fs.as_ref(), dir).unwrap();
    let messages: Vec<&str> = report.problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(messages[0].contains("transaction 300"), "{messages:?}");
}

#[test]
fn a_clean_store_has_no_level_one_records_and_no_problems() {
    let fs = Arc::new(SimFileSystem::new());
    let dir = Path::new("/s");
    drop(Server::create(fs.clone(), dir, 4096, ServerOptions::default()).unwrap());
    let volume = Volume::open(fs.as_ref(), dir, None, OpenMode::ReadOnly).unwrap();
    let summary = log_inspect::log_summary(fs.as_ref(), dir, &volume).unwrap();
    assert_eq!(
        summary.undo_records + summary.compensation_records + summary.unfinished,
        0
    );
    assert!(summary.problems.is_empty(), "{:?}", summary.problems);
    assert!(summary.end_lsn >= summary.checkpoint_lsn);
}
