//! A commit left unforced releases its locks before it is durable, which only a
//! subtransaction may do (strategy S2/PS: its parent's forced end makes it durable). A flat
//! transaction asking for it is refused before anything is appended, and keeps its locks.

use lodestore_core::Error;
use lodestore_server::{LockMode, PageServer, Server, ServerOptions, TxnKind};
use lodestore_storage::SimFileSystem;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn only_a_subtransaction_may_leave_its_commit_unforced() {
    let fs = Arc::new(SimFileSystem::new());
    let options = ServerOptions {
        lock_wait_timeout: Duration::from_millis(100),
        ..ServerOptions::default()
    };
    let server = Server::create(fs, Path::new("/s"), 4096, options).unwrap();
    let page = server.root_directory().page();

    let flat = server.begin().unwrap();
    server.lock_page(flat, page, LockMode::Exclusive).unwrap();
    let appended = server.log_stats().records;
    let err = server.ship_and_commit_unforced(flat, &[]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.contains("not a subtransaction")),
        "{err}"
    );
    assert_eq!(server.log_stats().records, appended, "nothing appended");
    // Still active, its lock still held.
    let other = server.begin().unwrap();
    assert!(matches!(
        server.lock_page(other, page, LockMode::Shared),
        Err(Error::LockTimeout { .. })
    ));
    server.abort(other).unwrap();
    server.commit(flat).unwrap();

    // A subtransaction's unforced commit ends it and its page lock at once.
    let parent = server.begin().unwrap();
    let sub = server.begin_transaction(TxnKind::Sub { parent }).unwrap();
    server.lock_page(sub, page, LockMode::Exclusive).unwrap();
    server.ship_and_commit_unforced(sub, &[]).unwrap();
    let reader = server.begin().unwrap();
    server.lock_page(reader, page, LockMode::Shared).unwrap();
    server.commit(reader).unwrap();
    server.commit(parent).unwrap();

    let gone = server.begin().unwrap();
    server.abort(gone).unwrap();
    assert!(matches!(
        server.ship_and_commit_unforced(gone, &[]),
        Err(Error::TransactionInactive { .. })
    ));
}
