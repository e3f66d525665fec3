//! A page written home in the middle of a change: a client's log records of one change may
//! reach the server apart, and a checkpoint (or an eviction) may write the page between them,
//! when its slotted structure is not whole. Recovery must take such a page as the log left it
//! (checksum and header sound) and undo the loser that was changing it, not refuse the page.

use lodestore_core::PageId;
use lodestore_server::{
    LockMode, PageServer, PageUpdates, RecoveryMethodKind, Server, ServerOptions,
};
use lodestore_storage::{slotted, Fault, SimFileSystem};
use std::path::Path;
use std::sync::Arc;

const PAGE: usize = 4096;
/// The slot count's place in a slotted page's header.
const SLOT_COUNT_AT: usize = 32;

fn options(method: RecoveryMethodKind) -> ServerOptions {
    ServerOptions {
        method: Some(method),
        ..ServerOptions::default()
    }
}

#[test]
fn a_loser_page_left_between_two_records_of_one_change_is_undone_at_restart() {
    for method in [RecoveryMethodKind::Esm, RecoveryMethodKind::Redo] {
        let fs = Arc::new(SimFileSystem::new());
        let dir = Path::new("/s");
        let server = Server::create(fs.clone(), dir, PAGE, options(method)).unwrap();
        let page: PageId = server.root_directory().page();
        let txn = server.begin().unwrap();
        server.lock_page(txn, page, LockMode::Exclusive).unwrap();
        let mut original = vec![0u8; PAGE];
        server.fetch_page(txn, page, &mut original).unwrap();
        slotted::validate(&original).unwrap();

        // The first record of an allocation: one more slot, its entry not yet written.
        let count = u16::from_le_bytes([original[SLOT_COUNT_AT], original[SLOT_COUNT_AT + 1]]);
        let mut batch = PageUpdates::new();
        batch.push(
            page,
            SLOT_COUNT_AT as u32,
            &original[SLOT_COUNT_AT..SLOT_COUNT_AT + 2],
            &(count + 1).to_le_bytes(),
        );
        server.ship_log_records(txn, &batch).unwrap();
        let mut halfway = vec![0u8; PAGE];
        server.fetch_page(txn, page, &mut halfway).unwrap();
        assert!(
            slotted::validate(&halfway).is_err(),
            "{method}: the test needs a page whose structure is not whole"
        );
        // A checkpoint steals the page in that state; then the machine dies.
        server.checkpoint().unwrap();
        fs.crash_now();
        drop(server);
        fs.recover(Fault::DropUnsynced, 1);

        let server = Server::open(fs.clone(), dir, None, options(method))
            .unwrap_or_else(|e| panic!("{method}: restart refused the page: {e}"));
        assert_eq!(server.restart_report().losers, 1, "{method}");
        let txn = server.begin().unwrap();
        server.lock_page(txn, page, LockMode::Shared).unwrap();
        let mut restored = vec![0u8; PAGE];
        server.fetch_page(txn, page, &mut restored).unwrap();
        slotted::validate(&restored).unwrap();
        assert_eq!(
            restored[16..],
            original[16..],
            "{method}: the page is back as it was (its LSN aside)"
        );
    }
}
