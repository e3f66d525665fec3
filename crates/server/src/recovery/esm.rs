//! The ESM recovery method: ARIES on pages.
//!
//! Logging a change: the server diffs the shipped page against its own copy and logs one update
//! record (before and after bytes) per changed range. Redo never depends on a page a crash
//! may have torn: the first change of a fresh page (never changed by a logged record, so
//! whatever an extension wrote) is preceded by its image, and every other page reaches home
//! through the double-write file, which a restart puts home first.
//!
//! Restart: analysis (from the checkpoint's begin record: which transactions were active, which
//! committed), redo of every change whose effect the page lacks (repeating history, losers
//! included), then undo of the losers, writing a compensation record for every change undone.
//! A crash during restart leaves compensation records that the next restart redoes and follows
//! (their undo-next LSN), so restarting again gives the same result.

use super::restart::{Replayed, RestartPass};
use super::{
    apply_client_updates, revert_client_updates, RecoveryMethod, RecoveryMethodKind, RestartReport,
};
use crate::interface::PageUpdate;
use crate::server::{Server, State, TxnState};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_loggen::{page_ranges, UPDATE_RECORD_FIXED_BYTES};
use lodestore_storage::bytes::is_all_zero;
use lodestore_storage::page;
use lodestore_wal::{Record, RecordBody, UpdateRef};
use std::collections::{BTreeMap, BTreeSet};

/// Serves both `esm` and `redo`: they share the log and restart; what differs is whether
/// clients ship the pages their records describe, which the clients learn from the kind.
pub struct Esm {
    pub kind: RecoveryMethodKind,
}

impl RecoveryMethod for Esm {
    fn kind(&self) -> RecoveryMethodKind {
        self.kind
    }

    fn log_page_change(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        image: &[u8],
    ) -> Result<Lsn> {
        server.cache_page_in_change(state, page)?;
        let prev = last_lsn(state, txn);
        let old = state.pool.get(page).expect("page just cached");
        // Page diffing (QuickStore section 3.2.2): ranges within objects, merged for the least
        // log traffic; checksum and LSN are the server's to set.
        let ranges = page_ranges(old, image, UPDATE_RECORD_FIXED_BYTES);
        let image_first = needs_image_first(old).then_some(old);
        let changes = ranges
            .iter()
            .map(|range| (range.start, &old[range.clone()], &image[range.clone()]));
        let imaged = image_first.is_some();
        let Some(logged) = append_changes(server, txn, prev, page, image_first, changes)? else {
            return Ok(page::lsn(old));
        };
        if imaged {
            image_logged(state, page);
        }
        let current = state.pool.get_mut(page).expect("page cached");
        for range in ranges {
            current[range.clone()].copy_from_slice(&image[range]);
        }
        Ok(changes_logged(server, state, txn, page, logged))
    }

    fn log_client_updates(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        updates: &[PageUpdate<'_>],
    ) -> Result<Lsn> {
        server.cache_page_in_change(state, page)?;
        let prev = last_lsn(state, txn);
        let current = state.pool.get_mut(page).expect("page just cached");
        // The page as it was goes first when it is fresh: once per page, so a copy is fine.
        let image_first = needs_image_first(current).then(|| current.to_vec());
        // Applied in place, so the before bytes are checked in order: a record's may be what
        // an earlier one wrote.
        apply_client_updates(txn, page, current, updates)?;
        let changes = updates
            .iter()
            .map(|u| (u.offset as usize, u.before, u.after));
        match append_changes(server, txn, prev, page, image_first.as_deref(), changes) {
            Ok(Some(logged)) => {
                if image_first.is_some() {
                    image_logged(state, page);
                }
                Ok(changes_logged(server, state, txn, page, logged))
            }
            Ok(None) => Ok(page::lsn(state.pool.get(page).expect("page cached"))),
            Err(e) => {
                let current = state.pool.get_mut(page).expect("page cached");
                revert_client_updates(current, updates);
                Err(e)
            }
        }
    }

    fn rollback(&self, server: &Server, state: &mut State, txn: TxnId) -> Result<()> {
        let Some(own) = state.txns.get(&txn) else {
            return Ok(());
        };
        let last = own.last_lsn;
        if last == Lsn::ZERO {
            return Ok(());
        }
        let abort = server.log.append(Some(txn), last, &RecordBody::Abort)?;
        state.txns.get_mut(&txn).expect("checked").last_lsn = abort;
        undo(server, state, txn, last)?;
        let own = state.txns.get(&txn).expect("checked");
        server
            .log
            .append(Some(txn), own.last_lsn, &RecordBody::End)?;
        Ok(())
    }

    fn writes_new_pages_home(&self) -> bool {
        true
    }

    fn restart_may_defer_checkpoint(&self) -> bool {
        // Repeating history and the compensation records of the undo make a second replay
        // of the same log land on the same pages, so the closing checkpoint can wait.
        true
    }

    fn restart_pass(&self) -> Box<dyn RestartPass> {
        Box::new(EsmRestart::default())
    }

    /// The pool's copies with the transaction's updates undone from their before bytes, in
    /// one walk back along its records (nothing is logged: the copies are for reading).
    fn committed_images(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        pages: &[PageId],
    ) -> Result<Vec<Vec<u8>>> {
        let mut images: BTreeMap<PageId, Vec<u8>> = BTreeMap::new();
        for &page in pages {
            server.cache_page_in_change(state, page)?;
            images.insert(page, state.pool.get(page).expect("page cached").to_vec());
        }
        let mut next = state.txns.get(&txn).map_or(Lsn::ZERO, |own| own.last_lsn);
        while next != Lsn::ZERO {
            let record = server.log.read(next)?;
            if let RecordBody::Update {
                page,
                offset,
                before,
                after,
            } = &record.body
            {
                if let Some(image) = images.get_mut(page) {
                    let range = *offset as usize..*offset as usize + after.len();
                    match before {
                        Some(before) => image[range].copy_from_slice(before),
                        None => image[range].fill(0),
                    }
                }
            }
            if let RecordBody::PagesHome { pages } = &record.body {
                // Free before the transaction wrote them.
                for page in pages {
                    if let Some(image) = images.get_mut(page) {
                        server.volume.format_new_page(*page, image);
                    }
                }
            }
            next = record.prev;
        }
        Ok(pages
            .iter()
            .map(|p| images.remove(p).expect("filled above"))
            .collect())
    }
}

/// ESM's restart: the records from the checkpoint on, kept for analysis, redo and undo.
#[derive(Default)]
struct EsmRestart {
    records: Vec<Record>,
}

impl RestartPass for EsmRestart {
    fn scanned(&mut self, record: Record) {
        self.records.push(record);
    }

    fn replay(
        self: Box<Self>,
        server: &Server,
        state: &mut State,
        report: &mut RestartReport,
    ) -> Result<Replayed> {
        let records = self.records;
        let found = analysis(&records);
        let mut touched = BTreeSet::new();
        for record in &records {
            redo(server, state, record, &found, report, &mut touched)?;
        }
        for (txn, (first, last)) in found.losers {
            state.txns.insert(
                txn,
                TxnState {
                    first_lsn: first,
                    last_lsn: last,
                    ..TxnState::default()
                },
            );
            let undone_before = server.log.stats().records;
            undo(server, state, txn, last)?;
            report.records_undone += server.log.stats().records - undone_before;
            let own = state.txns.remove(&txn).expect("inserted above");
            server
                .log
                .append(Some(txn), own.last_lsn, &RecordBody::End)?;
            touched.extend(own.touched);
            report.losers += 1;
        }
        Ok(Replayed {
            touched,
            ..Replayed::default()
        })
    }
}

/// Does a change of `page` (its image in the pool) log the page whole first? Only when no
/// logged record changed it yet (LSN 0: an extension's free page, whose write the log does not
/// cover and a crash may tear); later home writes of it go through the double-write file.
fn needs_image_first(page: &[u8]) -> bool {
    page::lsn(page) == Lsn::ZERO
}

/// The log holds `page` whole from the restart point on: its home writes until the next
/// checkpoint need no double write.
fn image_logged(state: &mut State, page: PageId) {
    state.logged_whole.insert(page);
    state.stats.page_images_logged += 1;
}

/// The last LSN `txn` logged, which its next record points back to.
fn last_lsn(state: &State, txn: TxnId) -> Lsn {
    state
        .txns
        .get(&txn)
        .expect("caller checked the transaction")
        .last_lsn
}

/// Appends update records of `txn` after its record `prev` for `changes` of `page` (offset,
/// bytes before, bytes after), borrowed wherever they are, preceded by `image_first`, the page
/// as it was before them, if given. Returns the first and last LSN appended, or `None` when
/// there were no changes (and nothing was appended).
fn append_changes<'a>(
    server: &Server,
    txn: TxnId,
    prev: Lsn,
    page: PageId,
    image_first: Option<&[u8]>,
    changes: impl IntoIterator<Item = (usize, &'a [u8], &'a [u8])>,
) -> Result<Option<(Lsn, Lsn)>> {
    let mut changes = changes.into_iter().peekable();
    if changes.peek().is_none() {
        return Ok(None);
    }
    let mut prev = prev;
    let mut first = None;
    if let Some(image) = image_first {
        let body = RecordBody::PageImage {
            page,
            image: image.to_vec(),
        };
        prev = server.log.append(Some(txn), prev, &body)?;
        first = Some(prev);
    }
    for (offset, before, after) in changes {
        debug_assert_eq!(before.len(), after.len());
        let update = UpdateRef {
            page,
            offset: offset as u32,
            before: (!is_all_zero(before)).then_some(before),
            after,
        };
        prev = server.log.append(Some(txn), prev, &update)?;
        first.get_or_insert(prev);
    }
    Ok(Some((first.expect("at least one record"), prev)))
}

/// Notes records `logged` (first and last LSN) of `txn`, whose changes the pool's copy of
/// `page` now holds: the page takes the last LSN and is dirty. Returns that LSN.
fn changes_logged(
    server: &Server,
    state: &mut State,
    txn: TxnId,
    page: PageId,
    (first, last): (Lsn, Lsn),
) -> Lsn {
    server.mark_changed(state, page, last);
    let own = state
        .txns
        .get_mut(&txn)
        .expect("caller checked the transaction");
    if own.first_lsn == Lsn::ZERO {
        own.first_lsn = first;
    }
    own.last_lsn = last;
    own.touched.insert(page);
    // Changed since it went home, if it did: what the commit knew of its image is stale.
    own.homed.remove(&page);
    last
}

/// Transactions to undo, each with its first and last LSN.
type Losers = BTreeMap<TxnId, (Lsn, Lsn)>;

/// What the analysis pass finds in the log from the checkpoint.
struct Analysis {
    /// Transactions to undo: active at the checkpoint or after it, neither committed nor
    /// ended.
    losers: Losers,
    /// Transactions whose commit record is in the log from the checkpoint (not those that
    /// ended otherwise: a rolled-back transaction ends too).
    committed: BTreeSet<TxnId>,
}

fn analysis(records: &[Record]) -> Analysis {
    let mut active: Losers = BTreeMap::new();
    let mut committed: BTreeSet<TxnId> = BTreeSet::new();
    if let Some(Record {
        body: RecordBody::CheckpointBegin { active: at_begin },
        ..
    }) = records.first()
    {
        for a in at_begin {
            active.insert(a.txn, (a.first_lsn, a.last_lsn));
        }
    }
    for record in records {
        let Some(txn) = record.txn else { continue };
        let entry = active.entry(txn).or_insert((record.lsn, record.lsn));
        entry.1 = record.lsn;
        match record.body {
            RecordBody::Commit => {
                // Committed: nothing of it is undone, and no end record will follow.
                committed.insert(txn);
            }
            RecordBody::End => {
                active.remove(&txn);
                committed.remove(&txn);
            }
            _ => {}
        }
    }
    active.retain(|txn, _| !committed.contains(txn));
    Analysis {
        losers: active,
        committed,
    }
}

/// Repeats the change of `record` if its page does not show it yet.
fn redo(
    server: &Server,
    state: &mut State,
    record: &Record,
    found: &Analysis,
    report: &mut RestartReport,
    touched: &mut BTreeSet<PageId>,
) -> Result<()> {
    let page_size = server.volume.page_size();
    match &record.body {
        RecordBody::PageImage { page, image } => {
            let current = readable_lsn(server, state, *page)?;
            if current.is_none_or(|lsn| lsn < record.lsn) {
                let Some(full) = image_of_page_size(image, page_size) else {
                    return Err(server.volume.corrupt(
                        *page,
                        format!(
                            "the full image at LSN {} holds {} bytes, more than a page of {page_size}",
                            record.lsn,
                            image.len()
                        ),
                    ));
                };
                place(server, state, *page, &full, record.lsn)?;
                report.images_installed += 1;
                touched.insert(*page);
            }
        }
        RecordBody::Update {
            page,
            offset,
            after,
            ..
        }
        | RecordBody::Compensation {
            page,
            offset,
            after,
            ..
        } => {
            let Some(lsn) = readable_lsn(server, state, *page)? else {
                return Err(server.volume.corrupt(
                    *page,
                    format!(
                        "redo of LSN {} needs this page, which is unreadable and has no full \
                         image earlier in the log",
                        record.lsn
                    ),
                ));
            };
            if lsn < record.lsn {
                write_logged(server, state, *page, *offset, after, record.lsn)?;
                report.redo_applied += 1;
                touched.insert(*page);
            }
        }
        RecordBody::PagesHome { pages }
            if record.txn.is_some_and(|t| found.losers.contains_key(&t)) =>
        {
            // A loser's new pages may be torn (written, not yet synced, when the crash came).
            // Its undo formats them free; until then, a torn one is free already, so that
            // the loser's later changes of it can be redone and undone as logged. A winner's
            // were synced before its commit: one unreadable now is damage, reported when read.
            let mut free = vec![0u8; page_size];
            for &page in pages {
                if readable_lsn(server, state, page)?.is_none() {
                    server.volume.format_new_page(page, &mut free);
                    place(server, state, page, &free, record.lsn)?;
                    touched.insert(page);
                }
            }
        }
        RecordBody::PagesHome { pages }
            if record.txn.is_some_and(|t| found.committed.contains(&t)) =>
        {
            // A committed transaction's pages were synced before its commit. Past the recorded
            // page count a page of zeros reads as free (the file grew before anything was
            // written there), so one of these holding nothing would pass unnoticed: it is
            // damage. (A transaction rolled back ended without committing: its pages may never
            // have been written, and its undo logged them free, redone after this record.)
            for &page in pages {
                if !state.pool.contains(page) && server.volume.holds_nothing(page)? {
                    let txn = record.txn.expect("guarded above");
                    return Err(server.volume.corrupt(
                        page,
                        format!(
                            "transaction {txn} wrote this page home and committed (LSN {}), but \
                             it holds nothing",
                            record.lsn
                        ),
                    ));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// A logged page image (its trailing zeros not stored) as a whole page, if it fits in one.
fn image_of_page_size(image: &[u8], page_size: usize) -> Option<Vec<u8>> {
    let mut full = vec![0u8; page_size];
    full.get_mut(..image.len())?.copy_from_slice(image);
    Some(full)
}

/// Writes `bytes` at `offset` of the pool's copy of `page` (cached), the change of the record
/// at `lsn`, which the page then carries.
fn write_logged(
    server: &Server,
    state: &mut State,
    page: PageId,
    offset: u32,
    bytes: &[u8],
    lsn: Lsn,
) -> Result<()> {
    let current = state.pool.get_mut(page).expect("page cached");
    let range = offset as usize..offset as usize + bytes.len();
    let Some(target) = current.get_mut(range.clone()) else {
        return Err(server.volume.corrupt(
            page,
            format!(
                "the log record at LSN {lsn} writes bytes {}..{}, past the page",
                range.start, range.end
            ),
        ));
    };
    target.copy_from_slice(bytes);
    server.mark_changed(state, page, lsn);
    Ok(())
}

/// The LSN of `page` if it can be read (bringing it into the pool), `None` if it cannot: past
/// the end of the file, or failing its checks (torn).
fn readable_lsn(server: &Server, state: &mut State, page: PageId) -> Result<Option<Lsn>> {
    if !state.pool.contains(page) {
        if page.0 >= server.volume.page_count() {
            return Ok(None);
        }
        match server.cache_page_in_change(state, page) {
            Ok(()) => {}
            Err(Error::CorruptPage { .. }) => return Ok(None),
            Err(other) => return Err(other),
        }
    }
    Ok(Some(page::lsn(state.pool.get(page).expect("page cached"))))
}

/// Puts a full image of `page` at `lsn` into the pool, growing the file if the page is past it.
fn place(server: &Server, state: &mut State, page: PageId, image: &[u8], lsn: Lsn) -> Result<()> {
    server.volume.extend_to(page.0 + 1)?;
    if !state.pool.contains(page) {
        server.install(state, page, image)?;
    }
    server.put_changed(state, page, image, lsn);
    Ok(())
}

/// Walks `txn`'s records back from `from`, undoing each update with a compensation record.
fn undo(server: &Server, state: &mut State, txn: TxnId, from: Lsn) -> Result<()> {
    let mut next = from;
    while next != Lsn::ZERO {
        let record = server.log.read(next)?;
        next = match record.body {
            RecordBody::Update {
                page,
                offset,
                before,
                after,
            } => {
                let restored = before.unwrap_or_else(|| vec![0u8; after.len()]);
                server.volume.extend_to(page.0 + 1)?;
                server.cache_page_in_change(state, page)?;
                let mut prev = last_lsn(state, txn);
                let current = state.pool.get(page).expect("page cached");
                // Like any change, the first one of a fresh page logs its image.
                if needs_image_first(current) {
                    let image = RecordBody::PageImage {
                        page,
                        image: current.to_vec(),
                    };
                    prev = server.log.append(Some(txn), prev, &image)?;
                    image_logged(state, page);
                }
                let clr = server.log.append(
                    Some(txn),
                    prev,
                    &RecordBody::Compensation {
                        page,
                        offset,
                        after: restored.clone(),
                        undo_next: record.prev,
                    },
                )?;
                write_logged(server, state, page, offset, &restored, clr)?;
                let own = state.txns.get_mut(&txn).expect("checked");
                own.last_lsn = clr;
                own.touched.insert(page);
                record.prev
            }
            RecordBody::Compensation { undo_next, .. } => undo_next,
            RecordBody::PagesHome { pages } => {
                // Written home instead of logged, so nothing says what the file held there
                // before; it was a free page, and it is one again, logged whole (the page
                // on disk may be torn: it is not read).
                let mut free = vec![0u8; server.volume.page_size()];
                for page in pages {
                    server.volume.format_new_page(page, &mut free);
                    let image = RecordBody::PageImage {
                        page,
                        image: free.clone(),
                    };
                    let lsn = server.log.append(Some(txn), last_lsn(state, txn), &image)?;
                    place(server, state, page, &free, lsn)?;
                    image_logged(state, page);
                    let own = state.txns.get_mut(&txn).expect("checked");
                    own.last_lsn = lsn;
                    own.touched.insert(page);
                }
                record.prev
            }
            _ => record.prev,
        };
    }
    Ok(())
}
