//! The versions hook beside every recovery method: a component defined here, outside the
//! engine, sees each page's pre-image just before its home location is overwritten, and serves
//! the page as of a past LSN from what it kept. Without such a component, reading as of a past
//! point is refused by name.

use lodestore_core::{Error, Lsn, PageId, Result};
use lodestore_server::versions::{HomeReader, PageVersions};
use lodestore_server::{
    LockMode, PageServer, PageUpdates, RecoveryMethodKind, Server, ServerOptions,
};
use lodestore_storage::{page, MemoryFileSystem};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

const PAGE: usize = 4096;
const AT: usize = PAGE / 2;

/// Keeps every pre-image, with the LSN range it was current for: [its own LSN, the LSN of the
/// version that replaced it).
#[derive(Default)]
struct KeepEveryVersion {
    kept: Mutex<BTreeMap<PageId, Vec<Kept>>>,
}

/// A pre-image: current from its own LSN to the LSN of the version that replaced it.
type Kept = (Lsn, Lsn, Vec<u8>);

impl PageVersions for KeepEveryVersion {
    fn before_home_write(&self, page: PageId, lsn: Lsn, home: HomeReader<'_>) -> Result<()> {
        let mut old = vec![0u8; PAGE];
        if home(&mut old)? && page::lsn(&old) < lsn {
            let from = page::lsn(&old);
            let mut kept = self.kept.lock().unwrap();
            kept.entry(page).or_default().push((from, lsn, old));
        }
        Ok(())
    }

    fn page_as_of(&self, page: PageId, at: Lsn, buf: &mut [u8]) -> Result<bool> {
        let kept = self.kept.lock().unwrap();
        let found = kept.get(&page).and_then(|versions| {
            versions
                .iter()
                .find(|(from, to, _)| *from <= at && at < *to)
        });
        match found {
            Some((_, _, image)) => {
                buf.copy_from_slice(image);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Commits `value` at byte `AT` of `page`; returns the commit's LSN.
fn set_byte(server: &Server, page: PageId, value: u8) -> Lsn {
    let txn = server.begin().unwrap();
    server.lock_page(txn, page, LockMode::Exclusive).unwrap();
    let mut current = vec![0u8; PAGE];
    server.fetch_page(txn, page, &mut current).unwrap();
    let mut batch = PageUpdates::new();
    batch.push(page, AT as u32, &current[AT..AT + 1], &[value]);
    server.ship_log_records(txn, &batch).unwrap();
    server.commit(txn).unwrap()
}

#[test]
fn a_versions_component_sees_pre_images_and_serves_the_past_under_every_method() {
    for method in RecoveryMethodKind::ALL {
        let versions = Arc::new(KeepEveryVersion::default());
        let options = ServerOptions {
            method: Some(method),
            versions: Some(versions.clone()),
            ..ServerOptions::default()
        };
        let fs = Arc::new(MemoryFileSystem::new());
        let server = Server::create(fs, Path::new("/s"), PAGE, options).unwrap();
        let page = server.root_directory().page();
        server.checkpoint().unwrap();
        let mut buf = vec![0u8; PAGE];
        // Every record of the first transaction comes after this point.
        let before_first = server.log().end_lsn();
        let first = set_byte(&server, page, 1);
        server.checkpoint().unwrap();
        let second = set_byte(&server, page, 2);
        server.checkpoint().unwrap();

        // Before both commits: the byte as created.
        assert!(
            server.page_as_of(page, first, &mut buf).unwrap(),
            "{method}"
        );
        assert_eq!(buf[AT], 1, "{method}: as of the first commit");
        assert!(
            server
                .page_as_of(page, Lsn(before_first.0 - 1), &mut buf)
                .unwrap(),
            "{method}"
        );
        assert_eq!(buf[AT], 0, "{method}: before the first commit");
        // The current version is the server's own, not a kept one.
        assert!(
            !server.page_as_of(page, second, &mut buf).unwrap(),
            "{method}"
        );
        let kept = versions.kept.lock().unwrap();
        assert!(
            kept[&page].len() >= 2,
            "{method}: {} kept",
            kept[&page].len()
        );
    }
}

#[test]
fn without_a_versions_component_the_past_is_refused() {
    let fs = Arc::new(MemoryFileSystem::new());
    let server = Server::create(fs, Path::new("/s"), PAGE, ServerOptions::default()).unwrap();
    let page = server.root_directory().page();
    let mut buf = vec![0u8; PAGE];
    match server.page_as_of(page, Lsn(1), &mut buf) {
        Err(Error::Unsupported(reason)) => assert!(reason.contains("versions"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
