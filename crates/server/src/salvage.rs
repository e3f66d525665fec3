//! Salvage: every page of a damaged store that still verifies, copied into a new store at the
//! same page number, so every object keeps its OID and the references between objects stay
//! true. What cannot be read is left out and reported: a damaged page becomes a free page, a
//! large object that lost any of its pages is removed whole, and large-object pages whose
//! descriptor was lost are freed. SQLite's `.recover` is the model; copying pages rather than
//! objects is what keeps a graph of objects a graph.

use crate::space::{entry_for_image, SpaceManager};
use lodestore_core::{Error, Lsn, Oid, PageId, Result};
use lodestore_storage::directory::DIRECTORY_PAGE;
use lodestore_storage::large::{self, Descriptor};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::{slotted, spacemap, Volume};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What salvage copied and what it left out.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SalvageReport {
    /// Data pages of the source read (map pages and superblocks are rebuilt, not copied).
    pub pages_read: u64,
    /// Slotted and large-data pages copied.
    pub pages_copied: u64,
    /// Pages that did not verify, with the reason; they are free pages in the copy.
    pub damaged_pages: Vec<(u32, String)>,
    /// Objects copied (small and large, Lodestore's own included).
    pub objects_copied: u64,
    /// Large objects left out because a page of theirs was damaged.
    pub large_objects_lost: Vec<u64>,
    /// Large-object pages whose descriptor was on a damaged page: freed.
    pub orphaned_pages_freed: u64,
    /// Did the named-roots directory survive?
    pub roots_copied: bool,
}

/// Copies what can be read of `source` into `target`, a new, empty, closed store of the same
/// page size opened for writing. The target's file is synced and its superblock updated.
pub fn copy_pages(source: &Volume, target: &Volume) -> Result<SalvageReport> {
    let page_size = source.page_size();
    if target.page_size() != page_size {
        return Err(Error::InvalidArgument(format!(
            "salvage into a store of {}-byte pages from one of {page_size}",
            target.page_size()
        )));
    }
    let mut report = SalvageReport::default();
    target.extend_to(source.page_count())?;
    let mut buf = vec![0u8; page_size];
    // Large-data page -> its owner, for the pages copied.
    let mut large_pages: BTreeMap<PageId, Oid> = BTreeMap::new();
    let mut slotted_pages = Vec::new();
    for p in DIRECTORY_PAGE.0..source.page_count() {
        let id = PageId(p);
        if spacemap::is_map_page(id, page_size) {
            continue;
        }
        report.pages_read += 1;
        match source.read_page(id, &mut buf) {
            Ok(PageKind::Slotted) => slotted_pages.push(id),
            Ok(PageKind::LargeData) => {
                large_pages.insert(id, large::owner(&buf));
            }
            Ok(_) => continue,
            Err(Error::CorruptPage { reason, .. }) => {
                report.damaged_pages.push((p, reason));
                continue;
            }
            Err(other) => return Err(other),
        }
        // The copy's log starts afresh: page LSNs of the old log would read as "newer than
        // any change", and recovery would skip real changes to these pages.
        page::set_lsn(&mut buf, Lsn::ZERO);
        target.write_page(id, &mut buf)?;
        report.pages_copied += 1;
    }
    report.roots_copied = slotted_pages.contains(&DIRECTORY_PAGE);

    // A large object survives only with every one of its pages.
    let mut claimed = BTreeSet::new();
    for &id in &slotted_pages {
        target.read_page(id, &mut buf)?;
        let mut changed = false;
        for slot in slotted::live_slots(&buf).collect::<Vec<_>>() {
            let Ok(Some(record)) = slotted::record(&buf, slot) else {
                continue;
            };
            let oid = Oid::new(target.volume_id(), id, slot);
            if !record.large {
                report.objects_copied += 1;
                continue;
            }
            let whole = Descriptor::decode(&buf[record.payload()], page_size)
                .ok()
                .filter(|d| d.pages().all(|p| large_pages.get(&p) == Some(&oid)));
            match whole {
                Some(descriptor) => {
                    claimed.extend(descriptor.pages());
                    report.objects_copied += 1;
                }
                None => {
                    slotted::remove(&mut buf, slot);
                    report.large_objects_lost.push(oid.0);
                    changed = true;
                }
            }
        }
        if changed {
            target.write_page(id, &mut buf)?;
        }
    }
    for (&id, _) in large_pages.iter().filter(|(id, _)| !claimed.contains(*id)) {
        page::format(&mut buf, PageKind::Free, id, target.volume_id());
        target.write_page(id, &mut buf)?;
        report.orphaned_pages_freed += 1;
    }

    // The space map is rebuilt from what the pages now are.
    let mut space = SpaceManager::load(target)?;
    for p in DIRECTORY_PAGE.0..target.page_count() {
        let id = PageId(p);
        if spacemap::is_map_page(id, page_size) {
            continue;
        }
        target.read_page(id, &mut buf)?;
        space.set(id, entry_for_image(id, &buf));
    }
    space.write_dirty_maps(target, Lsn::ZERO)?;
    target.sync()?;
    let root_directory = source.superblock().root_directory;
    let page_count = target.page_count();
    let roots_copied = report.roots_copied;
    target.update_superblock(|sb| {
        sb.page_count = page_count;
        if roots_copied {
            sb.root_directory = root_directory;
        }
    })?;
    Ok(report)
}
