//! Pages the volume grew by are allocated without being read back (nothing is written there
//! before they are used): the server serves the image the growth gives them. That image must
//! be the one a checkpoint puts on disk, and a page allocated this way must take changes and
//! keep them across a reopen, under every recovery method. A reservation of such pages does
//! not cache them before they are taken, and the search for room passes over holes too small
//! to be worth a read.

use lodestore_core::{PageId, TypeId};
use lodestore_server::{
    LockMode, PageServer, RecoveryMethodKind, Server, ServerOptions, ShippedPage,
};
use lodestore_storage::volume::data_file_path;
use lodestore_storage::{page, slotted, FileSystem, MemoryFileSystem, OpenMode, PageKind};
use std::path::Path;
use std::sync::Arc;

const PAGE: usize = 4096;
/// More than one extension's worth (an extension adds at least 64 pages).
const PAGES: usize = 150;

/// Ships `images` as new (unlogged) pages `pages` of `txn` and commits it.
fn ship_and_commit(
    server: &Server,
    txn: lodestore_core::TxnId,
    pages: &[PageId],
    images: &[Vec<u8>],
) {
    ship(server, txn, pages, images);
    server.commit(txn).unwrap();
}

/// Ships `images` of `pages` as the transaction's new pages, unlogged.
fn ship(server: &Server, txn: lodestore_core::TxnId, pages: &[PageId], images: &[Vec<u8>]) {
    let shipped: Vec<ShippedPage<'_>> = pages
        .iter()
        .zip(images)
        .map(|(&page, image)| ShippedPage {
            page,
            image,
            logged: false,
        })
        .collect();
    server.ship_dirty_pages(txn, &shipped).unwrap();
}

#[test]
fn new_pages_are_not_read_back_and_match_the_disk() {
    for method in [
        RecoveryMethodKind::Esm,
        RecoveryMethodKind::Redo,
        RecoveryMethodKind::Wpl,
    ] {
        let fs = Arc::new(MemoryFileSystem::new());
        let dir = Path::new("/s");
        let options = ServerOptions {
            method: Some(method),
            ..ServerOptions::default()
        };
        let server = Server::create(fs.clone(), dir, PAGE, options.clone()).unwrap();
        let txn = server.begin().unwrap();
        let reads_before = server.stats().pages_read;
        let pages: Vec<_> = (0..PAGES)
            .map(|_| server.allocate_pages(txn, 1).unwrap()[0].first)
            .collect();
        assert_eq!(
            server.stats().pages_read,
            reads_before,
            "{method}: allocation read new pages back"
        );

        let mut served = vec![vec![0u8; PAGE]; pages.len()];
        for (&page, served) in pages.iter().zip(&mut served) {
            server.fetch_page(txn, page, served).unwrap();
            assert_eq!(page::kind(served), Some(PageKind::Free), "{method}: {page}");
        }
        assert_eq!(
            server.stats().pages_read,
            reads_before,
            "{method}: fetches read"
        );
        // A checkpoint records the page count, so it writes what the pages read as.
        server.checkpoint().unwrap();
        let file = fs.open(&data_file_path(dir), OpenMode::ReadOnly).unwrap();
        let mut on_disk = vec![0u8; PAGE];
        for (&page, served) in pages.iter().zip(&served) {
            file.read_at(page.offset(PAGE), &mut on_disk).unwrap();
            assert!(
                *served == on_disk,
                "{method}: page {page} differs from the disk"
            );
        }
        let mut served = vec![0u8; PAGE];

        // Each page becomes a slotted page holding one object that names it.
        let mut images = Vec::new();
        for &page in &pages {
            let mut image = vec![0u8; PAGE];
            slotted::init(&mut image, page, 0);
            let slot = slotted::insert(&mut image, TypeId(7), 8, false).unwrap();
            let record = slotted::record(&image, slot).unwrap().unwrap();
            image[record.payload()].copy_from_slice(&u64::from(page.0).to_le_bytes());
            images.push(image);
        }
        ship_and_commit(&server, txn, &pages, &images);
        drop(server);

        let server = Server::open(fs.clone(), dir, Some(PAGE), options).unwrap();
        let txn = server.begin().unwrap();
        for (&page, image) in pages.iter().zip(&images) {
            server.lock_page(txn, page, LockMode::Shared).unwrap();
            server.fetch_page(txn, page, &mut served).unwrap();
            // The server sets the checksum (0..4) and the LSN (8..16).
            assert!(
                served[4..8] == image[4..8] && served[16..] == image[16..],
                "{method}: page {page} after reopening"
            );
        }
    }
}

#[test]
fn reserved_pages_enter_the_pool_only_when_taken() {
    let fs = Arc::new(MemoryFileSystem::new());
    let dir = Path::new("/s");
    // A pool of eight frames: caching a reservation of 100 pages would evict 92 of them.
    let options = ServerOptions {
        pool_bytes: 8 * PAGE,
        ..ServerOptions::default()
    };
    let server = Server::create(fs.clone(), dir, PAGE, options).unwrap();
    let before = server.stats();
    let (reservation, extents) = server.reserve_pages(100).unwrap();
    let pages: Vec<PageId> = extents
        .iter()
        .flat_map(|e| (e.first.0..e.first.0 + e.count).map(PageId))
        .collect();
    assert_eq!(pages.len(), 100);
    let after = server.stats();
    assert_eq!(
        after.pool_evictions, before.pool_evictions,
        "reserving cached pages"
    );
    assert_eq!(after.pages_read, before.pages_read, "reserving read pages");

    // Taken, each is the free page the file's growth gave it, as a checkpoint writes it.
    let txn = server.begin().unwrap();
    let mut served = Vec::new();
    for &page in pages.iter().step_by(7) {
        server.take_reserved(txn, reservation, page).unwrap();
        let mut image = vec![0u8; PAGE];
        server.fetch_page(txn, page, &mut image).unwrap();
        assert_eq!(page::kind(&image), Some(PageKind::Free), "{page}");
        served.push((page, image));
    }
    assert_eq!(server.stats().pages_read, before.pages_read);
    server.checkpoint().unwrap();
    let file = fs.open(&data_file_path(dir), OpenMode::ReadOnly).unwrap();
    let mut on_disk = vec![0u8; PAGE];
    for (page, image) in &served {
        file.read_at(page.offset(PAGE), &mut on_disk).unwrap();
        assert!(*image == on_disk, "page {page} differs from the disk");
    }
}

/// A slotted page of `page` holding one object of `len` bytes, shipped by `txn`.
fn page_with_object(page: PageId, len: usize) -> Vec<u8> {
    let mut image = vec![0u8; PAGE];
    slotted::init(&mut image, page, 0);
    slotted::insert(&mut image, TypeId(7), len, false).unwrap();
    image
}

#[test]
fn the_search_for_room_passes_over_small_holes() {
    let fs = Arc::new(MemoryFileSystem::new());
    let dir = Path::new("/s");
    let server = Server::create(fs.clone(), dir, PAGE, ServerOptions::default()).unwrap();
    let txn = server.begin().unwrap();
    let full = server.allocate_pages(txn, 1).unwrap()[0].first;
    let roomy = server.allocate_pages(txn, 1).unwrap()[0].first;
    // One page keeps 100 bytes free, less than a 32nd of it; the other keeps 1,000.
    let mut images = [page_with_object(full, 8), page_with_object(roomy, 8)];
    let fill = |image: &mut Vec<u8>, room: usize| {
        let len =
            slotted::free_bytes(image) - room - slotted::record_bytes(0) - slotted::SLOT_BYTES;
        slotted::insert(image, TypeId(7), len, false).unwrap();
        assert!(slotted::free_bytes(image).abs_diff(room) < 16);
    };
    fill(&mut images[0], 100);
    fill(&mut images[1], 1000);
    ship_and_commit(&server, txn, &[full, roomy], &images);

    let txn = server.begin().unwrap();
    let found = server
        .find_space(txn, 40, &[])
        .unwrap()
        .map(|(page, _)| page);
    assert_eq!(found, Some(roomy), "the page with room is offered");
    let found = server.find_space(txn, 40, &[roomy]).unwrap();
    assert_eq!(found, None, "a hole of 100 bytes is not worth a read");
    server.commit(txn).unwrap();
}

#[test]
fn pages_a_crash_left_unwritten_pass_check_and_are_written_when_a_count_covers_them() {
    let fs = Arc::new(MemoryFileSystem::new());
    let dir = Path::new("/s");
    let server = Server::create(fs.clone(), dir, PAGE, ServerOptions::default()).unwrap();
    let txn = server.begin().unwrap();
    let page = server.allocate_pages(txn, 1).unwrap()[0].first;
    // A crash: the server stops without closing, the file longer than the recorded count and
    // its new pages never written.
    std::mem::forget(server);
    let file = fs.open(&data_file_path(dir), OpenMode::ReadOnly).unwrap();
    let mut raw = vec![0u8; PAGE];
    file.read_at(page.offset(PAGE), &mut raw).unwrap();
    assert!(raw.iter().all(|&b| b == 0), "the allocation wrote its page");
    drop(file);
    // Past the recorded page count, a page of zeros reads as a free page.
    let report = lodestore_server::check::check(fs.as_ref(), dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    let server = Server::open(fs.clone(), dir, Some(PAGE), ServerOptions::default()).unwrap();
    drop(server);
    let file = fs.open(&data_file_path(dir), OpenMode::ReadOnly).unwrap();
    file.read_at(page.offset(PAGE), &mut raw).unwrap();
    assert_eq!(
        page::kind(&raw),
        Some(PageKind::Free),
        "formatted at the open"
    );
    let report = lodestore_server::check::check(fs.as_ref(), dir).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A store on `fs` in `/s` whose one transaction allocated `PAGES` pages and shipped them as
/// new pages, so they were written home (not committed yet), and those pages.
fn pages_written_home(fs: &Arc<MemoryFileSystem>) -> (Server, lodestore_core::TxnId, Vec<PageId>) {
    let server =
        Server::create(fs.clone(), Path::new("/s"), PAGE, ServerOptions::default()).unwrap();
    let txn = server.begin().unwrap();
    let pages: Vec<PageId> = (0..PAGES)
        .map(|_| server.allocate_pages(txn, 1).unwrap()[0].first)
        .collect();
    let images: Vec<Vec<u8>> = pages.iter().map(|&p| page_with_object(p, 8)).collect();
    ship(&server, txn, &pages, &images);
    assert!(server.stats().new_pages_written_home >= PAGES as u64);
    (server, txn, pages)
}

/// A crash (the server left without closing), then the storage holds zeros at `page`.
fn crash_and_zero(server: Server, fs: &Arc<MemoryFileSystem>, page: PageId) {
    std::mem::forget(server);
    let file = fs
        .open(&data_file_path(Path::new("/s")), OpenMode::Existing)
        .unwrap();
    file.write_at(page.offset(PAGE), &[0u8; PAGE]).unwrap();
}

#[test]
fn a_committed_page_written_home_that_the_file_lost_is_reported_not_read_as_free() {
    let fs = Arc::new(MemoryFileSystem::new());
    let (server, txn, pages) = pages_written_home(&fs);
    server.commit(txn).unwrap();
    let lost = pages[PAGES / 2];
    crash_and_zero(server, &fs, lost);
    let error = match Server::open(
        fs.clone(),
        Path::new("/s"),
        Some(PAGE),
        ServerOptions::default(),
    ) {
        Ok(_) => panic!("a lost committed page was read as free"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains(&lost.to_string()) && error.contains("holds nothing"),
        "{error}"
    );
}

/// A transaction rolled back after writing its new pages home ended without committing: its
/// pages may hold nothing (a crash can come before they are written), and its undo logged them
/// free. The restart must not take them for a committed transaction's lost pages.
#[test]
fn a_rolled_back_transactions_pages_that_hold_nothing_are_free_after_a_restart() {
    let fs = Arc::new(MemoryFileSystem::new());
    let (server, txn, pages) = pages_written_home(&fs);
    server.abort(txn).unwrap();
    // A later commit makes the rollback's records durable (its end among them).
    let later = server.begin().unwrap();
    let page = server.allocate_pages(later, 1).unwrap()[0].first;
    ship_and_commit(&server, later, &[page], &[page_with_object(page, 8)]);
    let never_written = pages[PAGES / 2];
    crash_and_zero(server, &fs, never_written);
    let server = Server::open(
        fs.clone(),
        Path::new("/s"),
        Some(PAGE),
        ServerOptions::default(),
    )
    .unwrap_or_else(|e| panic!("the restart took a rolled-back page for damage: {e}"));
    let txn = server.begin().unwrap();
    let mut image = vec![0u8; PAGE];
    server
        .lock_page(txn, never_written, LockMode::Shared)
        .unwrap();
    server.fetch_page(txn, never_written, &mut image).unwrap();
    assert_eq!(page::kind(&image), Some(PageKind::Free));
}
