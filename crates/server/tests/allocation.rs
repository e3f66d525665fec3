//! Pages of a new extension of the volume are allocated without being read back: the server
//! installs the image the extension wrote. That image must be the one on disk, and a page
//! allocated this way must take changes and keep them across a reopen, under every recovery
//! method.

use lodestore_core::TypeId;
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

        let file = fs.open(&data_file_path(dir), OpenMode::ReadOnly).unwrap();
        let mut on_disk = vec![0u8; PAGE];
        let mut served = vec![0u8; PAGE];
        for &page in &pages {
            file.read_at(page.offset(PAGE), &mut on_disk).unwrap();
            server.fetch_page(txn, page, &mut served).unwrap();
            assert_eq!(
                page::kind(&served),
                Some(PageKind::Free),
                "{method}: {page}"
            );
            assert!(
                served == on_disk,
                "{method}: page {page} differs from the disk"
            );
        }

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
        let shipped: Vec<ShippedPage<'_>> = pages
            .iter()
            .zip(&images)
            .map(|(&page, image)| ShippedPage {
                page,
                image,
                logged: false,
            })
            .collect();
        server.ship_dirty_pages(txn, &shipped).unwrap();
        server.commit(txn).unwrap();
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
