//! `lodestore check`: reads every page of a closed store and reports every problem it finds,
//! each naming the file and the page. Nothing is repaired and nothing is written.
//!
//! What is checked: both superblock copies; every page's checksum, format version, number and
//! kind; that space-map pages sit where the layout puts them; every slotted page's structure;
//! the named-roots directory; every large object's descriptor, and that each of its pages is
//! large data owned by it and claimed by no other object; that no large-data page is orphaned.
//! Stale space-map hints are reported as notes: the map is a hint and a stale one is harmless.

use lodestore_core::{Oid, PageId, Result, TypeId};
use lodestore_storage::bytes::is_all_zero;
use lodestore_storage::large::{self, Descriptor};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::spacemap;
use lodestore_storage::{directory, slotted, FileSystem, OpenMode, Volume};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub page: Option<u32>,
    pub message: String,
}

/// What a check found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub path: String,
    pub page_size: usize,
    pub pages_checked: u64,
    pub objects: u64,
    pub problems: Vec<Problem>,
    pub notes: Vec<String>,
}

impl CheckReport {
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

struct Checker<'a> {
    volume: &'a Volume,
    report: CheckReport,
    /// Large-data page -> the object whose descriptor claims it.
    claimed: HashMap<PageId, Oid>,
    /// Large-data page -> the owner its header names.
    large_pages: HashMap<PageId, Oid>,
    /// Hint entry per page as the space map records it (None where the map was unreadable).
    hints: Vec<Option<u8>>,
}

/// Checks the store in folder `dir`. `Err` only when the store cannot be opened at all (not a
/// store, newer format, both superblocks bad, in use); everything else is in the report.
pub fn check(fs: &dyn FileSystem, dir: &Path) -> Result<CheckReport> {
    let volume = Volume::open(fs, dir, None, OpenMode::ReadOnly)?;
    let mut checker = Checker {
        volume: &volume,
        report: CheckReport {
            path: volume.path().display().to_string(),
            page_size: volume.page_size(),
            pages_checked: 0,
            objects: 0,
            problems: Vec::new(),
            notes: Vec::new(),
        },
        claimed: HashMap::new(),
        large_pages: HashMap::new(),
        hints: vec![None; volume.page_count() as usize],
    };
    checker.superblocks()?;
    checker.pages()?;
    checker.cross_checks();
    let sb = volume.superblock();
    if crate::RecoveryMethodKind::from_code(sb.recovery_method).is_main_memory() {
        let report = &mut checker.report;
        report.pages_checked += crate::recovery::differential::inspect::check(
            fs,
            dir,
            sb.log_segment_bytes,
            volume.page_size(),
            volume.volume_id(),
            &mut report.problems,
        );
    } else {
        // The level-1 records of the log from the last checkpoint, which a warm start would
        // read. A log that cannot be read at all is recovery's to report (`check` recovers
        // next; `--no-recover` checks the data file alone).
        let problems = crate::log_inspect::log_summary(fs, dir, &volume)
            .map(|summary| summary.problems)
            .unwrap_or_default();
        let path = checker.report.path.clone();
        checker
            .report
            .problems
            .extend(problems.into_iter().map(|message| Problem {
                page: None,
                message: format!("{path}: {message}"),
            }));
    }
    Ok(checker.report)
}

impl Checker<'_> {
    fn problem(&mut self, page: Option<PageId>, message: impl Into<String>) {
        let message = message.into();
        let message = match page {
            Some(p) => format!("{}: page {p}: {message}", self.report.path),
            None => format!("{}: {message}", self.report.path),
        };
        self.report.problems.push(Problem {
            page: page.map(|p| p.0),
            message,
        });
    }

    fn superblocks(&mut self) -> Result<()> {
        let copies = self.volume.superblock_copies()?;
        let current = self.volume.superblock();
        for (copy, decoded) in copies.copies.iter().enumerate() {
            match decoded {
                Ok(sb) if sb.page_size == current.page_size => {}
                Ok(sb) => self.problem(
                    Some(PageId(copy as u32)),
                    format!("superblock copy records page size {}", sb.page_size),
                ),
                Err(problem) => self.problem(
                    Some(PageId(copy as u32)),
                    format!("superblock copy {copy} is damaged: {problem:?}"),
                ),
            }
        }
        self.report.pages_checked += 2;
        let tail = self.volume.unrecorded_tail_bytes()?;
        if tail > 0 {
            self.report.notes.push(format!(
                "{tail} bytes past the pages the last checkpoint recorded (recovery at the next open decides what they hold)"
            ));
        }
        Ok(())
    }

    fn pages(&mut self) -> Result<()> {
        let page_size = self.volume.page_size();
        let mut buf = vec![0u8; page_size];
        for p in spacemap::FIRST_MAP_PAGE.0..self.volume.page_count() {
            let id = PageId(p);
            self.volume.read_page_unverified(id, &mut buf)?;
            self.report.pages_checked += 1;
            let kind = match page::verify(&buf, id, self.volume.volume_id()) {
                Ok(kind) => kind,
                Err(reason) => {
                    self.problem(Some(id), reason);
                    continue;
                }
            };
            let map_here = spacemap::is_map_page(id, page_size);
            if map_here != (kind == PageKind::SpaceMap) {
                self.problem(
                    Some(id),
                    format!(
                        "a {} page where the layout expects {}",
                        kind.name(),
                        if map_here {
                            "a space map"
                        } else {
                            "a data page"
                        }
                    ),
                );
                continue;
            }
            match kind {
                PageKind::SpaceMap => self.space_map(id, &buf),
                PageKind::Slotted => self.slotted_page(id, &buf)?,
                PageKind::LargeData => {
                    self.large_pages.insert(id, large::owner(&buf));
                }
                PageKind::Free => {
                    if !is_all_zero(&buf[page::PAGE_HEADER_BYTES..]) {
                        self.problem(Some(id), "free page body is not zero");
                    }
                }
                PageKind::Superblock => self.problem(Some(id), "superblock outside pages 0 and 1"),
            }
            if p == directory::DIRECTORY_PAGE.0 && kind != PageKind::Slotted {
                self.problem(Some(id), "the root directory page is not a slotted page");
            }
            if !map_here {
                self.compare_hint(id, &buf);
            }
        }
        Ok(())
    }

    fn space_map(&mut self, id: PageId, buf: &[u8]) {
        if let Err(reason) = spacemap::validate(buf, id) {
            self.problem(Some(id), reason);
            return;
        }
        let entries = spacemap::entries(buf);
        let end = (id.0 as usize + 1 + entries.len()).min(self.volume.page_count() as usize);
        for p in id.0 as usize + 1..end {
            self.hints[p] = Some(entries[p - id.0 as usize - 1]);
        }
    }

    fn compare_hint(&mut self, id: PageId, buf: &[u8]) {
        let Some(hint) = self.hints[id.0 as usize] else {
            return;
        };
        let actual = crate::space::entry_for_image(id, buf);
        if hint != actual {
            self.report.notes.push(format!(
                "page {id}: space-map hint {hint} is stale (page says {actual})"
            ));
        }
    }

    fn slotted_page(&mut self, id: PageId, buf: &[u8]) -> Result<()> {
        if let Err(reason) = slotted::validate(buf) {
            self.problem(Some(id), reason);
            return Ok(());
        }
        let root_directory = self.volume.superblock().root_directory;
        for slot in slotted::live_slots(buf).collect::<Vec<_>>() {
            let oid = Oid::new(self.volume.volume_id(), id, slot);
            let Ok(Some(record)) = slotted::record(buf, slot) else {
                continue; // validate() accepted every live slot
            };
            if !record.type_id.is_reserved() {
                self.report.objects += 1;
            }
            let payload = &buf[record.payload()];
            if oid == root_directory {
                if record.type_id != TypeId::ROOT_DIRECTORY {
                    self.problem(
                        Some(id),
                        format!("object {oid} should be the root directory"),
                    );
                } else if let Err(reason) = directory::decode(payload) {
                    self.problem(Some(id), reason);
                }
            } else if record.type_id == TypeId::ROOT_DIRECTORY {
                self.problem(
                    Some(id),
                    format!("object {oid} has the root-directory type"),
                );
            }
            if record.large {
                self.large_object(oid, payload);
            }
        }
        if id == directory::DIRECTORY_PAGE
            && slotted::record(buf, root_directory.slot())
                .ok()
                .flatten()
                .is_none()
        {
            self.problem(Some(id), "the root directory object is missing");
        }
        Ok(())
    }

    fn large_object(&mut self, oid: Oid, descriptor: &[u8]) {
        let page_count = self.volume.page_count();
        match Descriptor::decode(descriptor, self.volume.page_size()) {
            Err(reason) => self.problem(Some(oid.page()), format!("object {oid}: {reason}")),
            Ok(descriptor) => {
                for page in descriptor.pages() {
                    if page.0 >= page_count {
                        self.problem(
                            Some(oid.page()),
                            format!("object {oid} claims page {page}, past the end of the file"),
                        );
                    } else if let Some(other) = self.claimed.insert(page, oid) {
                        self.problem(
                            Some(page),
                            format!("claimed by both object {other} and object {oid}"),
                        );
                    }
                }
            }
        }
    }

    fn cross_checks(&mut self) {
        let mut claimed: Vec<_> = self.claimed.iter().map(|(p, o)| (*p, *o)).collect();
        claimed.sort_unstable();
        for (page, oid) in claimed {
            match self.large_pages.get(&page) {
                Some(owner) if *owner == oid => {}
                Some(owner) => self.problem(
                    Some(page),
                    format!("large data owned by {owner}, but object {oid} claims it"),
                ),
                None => self.problem(
                    Some(page),
                    format!("object {oid} claims it, but it is not a large-data page"),
                ),
            }
        }
        let mut orphans: Vec<_> = self
            .large_pages
            .iter()
            .filter(|(page, _)| !self.claimed.contains_key(page))
            .map(|(page, owner)| (*page, *owner))
            .collect();
        orphans.sort_unstable();
        for (page, owner) in orphans {
            self.problem(
                Some(page),
                format!("large data of object {owner}, which does not claim it"),
            );
        }
    }
}
