//! Free-space management: the server's in-memory copy of the space-map hints (one byte per
//! page), searches over it, and the write-back of changed map pages.
//!
//! The map is derived state. A map page that fails its checksum is rebuilt from the pages it
//! describes; a hint that turns out wrong is corrected when it is found out. Nothing is ever
//! decided on a hint alone: callers look at the page before they use it.

use lodestore_core::{Lsn, PageId, Result};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::spacemap::{self, ENTRY_FREE, ENTRY_UNAVAILABLE, FIRST_MAP_PAGE};
use lodestore_storage::{directory::DIRECTORY_PAGE, slotted, Volume};
use std::collections::BTreeSet;

pub struct SpaceManager {
    page_size: usize,
    /// Hint per page of the file, indexed by page number.
    entries: Vec<u8>,
    /// How many pages have each hint: a search for room no page's hint promises (a node as
    /// large as a page, once every page is in use) ends at once instead of reading every
    /// hint, and a search stops once it has passed every page whose hint promises it.
    hint_counts: HintCounts,
    /// The most room a hint promises in each block of [`BLOCK_PAGES`] pages, in bytes (0 for
    /// none): a search for room passes a block where no page promises it with one comparison.
    /// A bulk load leaves few pages with room, far apart, and each search read every hint
    /// between them.
    block_room: Vec<u32>,
    /// Map pages whose on-disk copy is older than `entries`.
    dirty_maps: BTreeSet<PageId>,
    /// No free page lies below this one.
    free_from: u32,
    /// Where the last search for a slotted page with room succeeded.
    slotted_cursor: u32,
    /// Pages handed to active transactions: unavailable in memory, but persisted as free
    /// (on disk they are free until a transaction that used them commits).
    reserved: BTreeSet<PageId>,
}

/// Pages per block of [`SpaceManager::block_room`].
const BLOCK_PAGES: usize = 64;

/// The bytes a hint promises a search for room in a slotted page: free and unavailable pages
/// promise none.
fn room(entry: u8, page_size: usize) -> u32 {
    if entry == ENTRY_FREE || entry == ENTRY_UNAVAILABLE {
        0
    } else {
        spacemap::free_bytes_at_least(entry, page_size) as u32
    }
}

/// The hint that describes a page image.
pub fn entry_for_image(id: PageId, image: &[u8]) -> u8 {
    match page::kind(image) {
        Some(PageKind::Free) => ENTRY_FREE,
        Some(PageKind::Slotted) if id != DIRECTORY_PAGE => {
            spacemap::entry_for_free_bytes(slotted::free_bytes(image), image.len())
        }
        _ => ENTRY_UNAVAILABLE,
    }
}

/// Pages per hint value.
#[derive(Clone, Debug, PartialEq, Eq)]
struct HintCounts([u32; 256]);

impl Default for HintCounts {
    fn default() -> HintCounts {
        HintCounts([0; 256])
    }
}

impl HintCounts {
    fn of(entries: &[u8]) -> HintCounts {
        let mut counts = HintCounts::default();
        for &entry in entries {
            counts.add(entry);
        }
        counts
    }

    fn add(&mut self, entry: u8) {
        self.0[entry as usize] += 1;
    }

    fn remove(&mut self, entry: u8) {
        debug_assert!(self.0[entry as usize] > 0, "no page had hint {entry}");
        self.0[entry as usize] -= 1;
    }

    /// Pages whose hint satisfies `wanted`.
    fn matching(&self, wanted: impl Fn(u8) -> bool) -> u32 {
        (0..=u8::MAX)
            .filter(|&entry| wanted(entry))
            .map(|entry| self.0[entry as usize])
            .sum()
    }
}

impl SpaceManager {
    /// A manager that knows no pages yet (before recovery has run).
    pub fn empty(page_size: usize) -> SpaceManager {
        SpaceManager {
            page_size,
            entries: Vec::new(),
            hint_counts: HintCounts::default(),
            block_room: Vec::new(),
            dirty_maps: BTreeSet::new(),
            free_from: FIRST_MAP_PAGE.0 + 1,
            slotted_cursor: 0,
            reserved: BTreeSet::new(),
        }
    }

    /// Marks `page` as handed out.
    pub fn reserve(&mut self, page: PageId) {
        self.set(page, ENTRY_UNAVAILABLE);
        self.reserved.insert(page);
    }

    /// Ends a reservation, setting the hint to `entry`.
    pub fn unreserve(&mut self, page: PageId, entry: u8) {
        self.reserved.remove(&page);
        self.set(page, entry);
    }

    /// Ends a reservation whose hint was already refreshed.
    pub fn unreserve_keep(&mut self, page: PageId) {
        self.reserved.remove(&page);
    }

    /// Reads every map page of `volume`; a damaged one is rebuilt from its pages (and written
    /// back at the next commit).
    pub fn load(volume: &Volume) -> Result<SpaceManager> {
        let page_size = volume.page_size();
        let page_count = volume.page_count();
        let mut manager = SpaceManager {
            page_size,
            entries: vec![ENTRY_UNAVAILABLE; page_count as usize],
            hint_counts: HintCounts::default(),
            block_room: Vec::new(),
            dirty_maps: BTreeSet::new(),
            free_from: FIRST_MAP_PAGE.0 + 1,
            slotted_cursor: 0,
            reserved: BTreeSet::new(),
        };
        let per_map = spacemap::entries_per_map(page_size);
        let mut buf = vec![0u8; page_size];
        let mut map = FIRST_MAP_PAGE.0;
        while map < page_count {
            let covered_end = (map + 1 + per_map).min(page_count);
            let loaded = volume
                .read_page(PageId(map), &mut buf)
                .ok()
                .filter(|kind| *kind == PageKind::SpaceMap)
                .and_then(|_| spacemap::validate(&buf, PageId(map)).ok());
            if loaded.is_some() {
                let entries = spacemap::entries(&buf);
                for p in map + 1..covered_end {
                    manager.entries[p as usize] = entries[(p - map - 1) as usize];
                }
            } else {
                tracing::warn!(map_page = map, "space map page unreadable; rebuilding it");
                for p in map + 1..covered_end {
                    let entry = match volume.read_page(PageId(p), &mut buf) {
                        Ok(_) => entry_for_image(PageId(p), &buf),
                        Err(_) => ENTRY_UNAVAILABLE,
                    };
                    manager.entries[p as usize] = entry;
                }
                manager.dirty_maps.insert(PageId(map));
            }
            map += per_map + 1;
        }
        manager.hint_counts = HintCounts::of(&manager.entries);
        manager.block_room = vec![0; manager.entries.len().div_ceil(BLOCK_PAGES)];
        for block in 0..manager.block_room.len() {
            manager.refresh_block(block);
        }
        Ok(manager)
    }

    /// Takes in pages the file grew by. New pages are free; map pages are never available.
    pub fn grow(&mut self, page_count: u32) {
        let old = self.entries.len() as u32;
        for p in old..page_count {
            let entry = if spacemap::is_map_page(PageId(p), self.page_size) {
                ENTRY_UNAVAILABLE
            } else {
                ENTRY_FREE
            };
            self.entries.push(entry);
            self.hint_counts.add(entry);
        }
        // New pages are free or map pages, which promise no room.
        self.block_room
            .resize(self.entries.len().div_ceil(BLOCK_PAGES), 0);
        self.free_from = self.free_from.min(old);
    }

    pub fn entry(&self, page: PageId) -> u8 {
        self.entries
            .get(page.0 as usize)
            .copied()
            .unwrap_or(ENTRY_FREE)
    }

    /// Records a new hint for `page` (a data page inside the file).
    pub fn set(&mut self, page: PageId, entry: u8) {
        let index = page.0 as usize;
        assert!(
            index < self.entries.len(),
            "hint for page {page} past the end"
        );
        assert!(!spacemap::is_map_page(page, self.page_size) && page.0 > FIRST_MAP_PAGE.0);
        let old = self.entries[index];
        if old != entry {
            self.hint_counts.remove(old);
            self.hint_counts.add(entry);
            self.entries[index] = entry;
            let block = index / BLOCK_PAGES;
            let (old, new) = (room(old, self.page_size), room(entry, self.page_size));
            if new > self.block_room[block] {
                self.block_room[block] = new;
            } else if new < old && old == self.block_room[block] {
                self.refresh_block(block);
            }
            self.dirty_maps
                .insert(spacemap::locate(page, self.page_size).0);
            if entry == ENTRY_FREE {
                self.free_from = self.free_from.min(page.0);
            }
        }
    }

    /// The most room a page of `block` promises.
    fn refresh_block(&mut self, block: usize) {
        let from = block * BLOCK_PAGES;
        let to = (from + BLOCK_PAGES).min(self.entries.len());
        self.block_room[block] = self.entries[from..to]
            .iter()
            .map(|&e| room(e, self.page_size))
            .max()
            .unwrap_or(0);
    }

    /// Candidate slotted pages with at least `bytes` free, by the hints, starting where the last
    /// search succeeded. At most `limit` candidates.
    pub fn slotted_candidates(&self, bytes: usize, limit: usize) -> Vec<PageId> {
        let count = self.entries.len() as u32;
        let mut found = Vec::new();
        let promises = |entry: u8| {
            entry != ENTRY_FREE
                && entry != ENTRY_UNAVAILABLE
                && spacemap::free_bytes_at_least(entry, self.page_size) >= bytes
        };
        let mut promising = self.hint_counts.matching(promises);
        if count == 0 || promising == 0 {
            return found;
        }
        let start = self.slotted_cursor.min(count - 1);
        let mut i = 0;
        while i < count {
            let p = (start + i) % count;
            if (self.block_room[p as usize / BLOCK_PAGES] as usize) < bytes {
                // Nothing in the rest of this block: on to the next block, the file's start,
                // or the end of the round, whichever comes first.
                let to_block_end = (BLOCK_PAGES - p as usize % BLOCK_PAGES) as u32;
                i += to_block_end.min(count - p).min(count - i);
                continue;
            }
            if promises(self.entries[p as usize]) {
                found.push(PageId(p));
                promising -= 1;
                if found.len() >= limit || promising == 0 {
                    break;
                }
            }
            i += 1;
        }
        found
    }

    pub fn note_slotted_success(&mut self, page: PageId) {
        self.slotted_cursor = page.0;
    }

    /// The lowest page the hints call free, if any.
    pub fn next_free(&mut self) -> Option<PageId> {
        let from = self.free_from as usize;
        match self.entries[from.min(self.entries.len())..]
            .iter()
            .position(|&e| e == ENTRY_FREE)
        {
            Some(i) => {
                self.free_from = (from + i) as u32;
                Some(PageId((from + i) as u32))
            }
            None => {
                self.free_from = self.entries.len() as u32;
                None
            }
        }
    }

    /// Writes every map page whose hints changed. The caller syncs.
    pub fn write_dirty_maps(&mut self, volume: &Volume, lsn: Lsn) -> Result<usize> {
        let per_map = spacemap::entries_per_map(self.page_size) as usize;
        let mut buf = vec![0u8; self.page_size];
        let written = self.dirty_maps.len();
        for map in std::mem::take(&mut self.dirty_maps) {
            spacemap::init(&mut buf, map, volume.volume_id());
            let first = map.0 as usize + 1;
            let end = (first + per_map).min(self.entries.len());
            if first < end {
                spacemap::entries_mut(&mut buf)[..end - first]
                    .copy_from_slice(&self.entries[first..end]);
            }
            for page in self
                .reserved
                .range(PageId(first as u32)..PageId(end as u32))
            {
                spacemap::entries_mut(&mut buf)[page.0 as usize - first] = ENTRY_FREE;
            }
            page::set_lsn(&mut buf, lsn);
            volume.write_page(map, &mut buf)?;
        }
        Ok(written)
    }

    pub fn has_dirty_maps(&self) -> bool {
        !self.dirty_maps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: usize = 4096;

    /// The search by hints as it was before the counts: every hint read, from the cursor.
    fn scan(manager: &SpaceManager, bytes: usize, limit: usize) -> Vec<PageId> {
        let count = manager.entries.len() as u32;
        let start = manager.slotted_cursor.min(count.saturating_sub(1));
        (0..count)
            .map(|i| (start + i) % count)
            .filter(|&p| {
                let entry = manager.entries[p as usize];
                entry != ENTRY_FREE
                    && entry != ENTRY_UNAVAILABLE
                    && spacemap::free_bytes_at_least(entry, PAGE) >= bytes
            })
            .take(limit)
            .map(PageId)
            .collect()
    }

    proptest! {
        /// Whatever hints pages get, the counts agree with them and a search finds the pages
        /// a scan of every hint finds, in the same order.
        #[test]
        fn a_search_finds_what_a_scan_finds(
            grow_to in 8u32..1000,
            changes in proptest::collection::vec((any::<u32>(), any::<u8>()), 0..400),
            // Some searches ask for exactly what a hint promises: the edge of every block skip.
            searches in proptest::collection::vec(
                (
                    prop_oneof![
                        0usize..PAGE,
                        (1u8..=254).prop_map(|e| spacemap::free_bytes_at_least(e, PAGE)),
                    ],
                    1usize..6,
                    any::<u32>(),
                ),
                1..20,
            ),
        ) {
            let mut manager = SpaceManager::empty(PAGE);
            manager.grow(grow_to);
            for (page, entry) in changes {
                let page = PageId(page % grow_to);
                if page.0 > FIRST_MAP_PAGE.0 && !spacemap::is_map_page(page, PAGE) {
                    manager.set(page, entry);
                }
            }
            prop_assert_eq!(&manager.hint_counts, &HintCounts::of(&manager.entries));
            let block_room: Vec<u32> = manager
                .entries
                .chunks(BLOCK_PAGES)
                .map(|block| block.iter().map(|&e| room(e, PAGE)).max().unwrap_or(0))
                .collect();
            prop_assert_eq!(&manager.block_room, &block_room);
            for (bytes, limit, cursor) in searches {
                manager.note_slotted_success(PageId(cursor % grow_to));
                prop_assert_eq!(
                    manager.slotted_candidates(bytes, limit),
                    scan(&manager, bytes, limit)
                );
            }
        }
    }
}
