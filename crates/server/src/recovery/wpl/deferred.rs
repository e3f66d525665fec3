//! Deferred page writes: the database-cache method of Hasse & Weikum's level-0 log (section 2,
//! "Ensuring Subtransaction Atomicity" and "Deferred Log Writes"), on whole-page logging's
//! table and installer (the `dbcache` recovery method).
//!
//! A shipped page is not logged. It waits in the pool, pinned (no steal while its transaction
//! runs), with the version it replaced kept in memory as its before-image (what an abort puts
//! back), and stamped with a provisional LSN above every real one, so that clients holding the
//! older version see a different LSN and fetch it again. At the transaction's end its pages
//! stay in the pool unpinned and not yet logged, in the persistence spheres
//! (`lodestore_multilevel::sphere`). A sphere reaches the log as one atomic write: one
//! after-image record per page, the last flagged EOS and naming the subtransactions it makes
//! durable (and, flagged EOT, the transaction it ends). After the write its pages are
//! committed copies of whole-page logging, which the installer or an eviction takes home.
//!
//! When a sphere is written: at a flat transaction's commit (its own sphere, EOT), at a
//! subtransaction's forced end (strategy S2), at a level-1 transaction's end (EOT; strategy
//! S2/PS writes nothing before), when a page of it must leave the pool (forced), and at every
//! checkpoint (all of them, before its begin record, so an L1 record before a checkpoint has
//! its subtransaction durable).

use super::WplState;
use crate::server::{Server, State};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_multilevel::records::AfterImageWrite;
use lodestore_multilevel::sphere::Sphere;
use lodestore_storage::page;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Provisional page LSNs start here: no log reaches it, so a stamp never equals a real LSN.
const PROVISIONAL_LSN_FIRST: u64 = 1 << 62;

/// A page as the pool held it before a running transaction first changed it.
struct BeforeImage {
    bytes: Vec<u8>,
    dirty: bool,
}

/// What deferred writes keep beside the WPL table.
#[derive(Default)]
pub(super) struct Deferred {
    /// Per running transaction, the pages it changed and their before-images.
    before: FxHashMap<TxnId, BTreeMap<PageId, BeforeImage>>,
    /// The running transaction whose change a page holds (its lock is exclusive: one at most).
    changer: FxHashMap<PageId, TxnId>,
    next_stamp: u64,
}

impl Deferred {
    pub(super) fn has_changes(&self, txn: TxnId) -> bool {
        self.before.get(&txn).is_some_and(|pages| !pages.is_empty())
    }

    fn stamp(&mut self) -> Lsn {
        let lsn = Lsn(PROVISIONAL_LSN_FIRST + self.next_stamp);
        self.next_stamp += 1;
        lsn
    }
}

fn split(state: &mut State) -> (&mut WplState, &mut crate::buffer_pool::BufferPool) {
    let wpl = state
        .method_state
        .downcast_mut::<WplState>()
        .expect("whole-page logging's state");
    (wpl, &mut state.pool)
}

/// `txn` changed `page` to `image` (a whole page): it waits in the pool, pinned, its
/// before-image kept. Returns the page's provisional LSN.
pub(super) fn change_page(
    server: &Server,
    state: &mut State,
    txn: TxnId,
    page: PageId,
    image: &[u8],
) -> Result<Lsn> {
    server.cache_page_in_change(state, page)?;
    let dirty = state.pool.is_dirty(page);
    let (wpl, pool) = split(state);
    let current = pool.get(page).expect("page just cached");
    let deferred = &mut wpl.deferred;
    if let Some(other) = deferred.changer.get(&page).filter(|t| **t != txn) {
        return Err(Error::InvalidArgument(format!(
            "page {page} holds a change of running transaction {other}; transaction {txn} \
             cannot change it too"
        )));
    }
    if let std::collections::btree_map::Entry::Vacant(first) =
        deferred.before.entry(txn).or_default().entry(page)
    {
        first.insert(BeforeImage {
            bytes: current.to_vec(),
            dirty,
        });
        deferred.changer.insert(page, txn);
    }
    let lsn = deferred.stamp();
    let frame = pool.get_mut(page).expect("page just cached");
    frame.copy_from_slice(image);
    page::set_lsn(frame, lsn);
    // Not home before it is logged and committed; not out of the pool while it runs.
    pool.mark_clean(page);
    pool.pin(page);
    state
        .txns
        .get_mut(&txn)
        .expect("caller checked the transaction")
        .touched
        .insert(page);
    Ok(lsn)
}

/// `txn` ended at level 0 (committed: its pages stay in the pool, not yet logged, for the
/// spheres; rolled back: their before-images are put back). Returns the pages it changed.
pub(super) fn end(state: &mut State, txn: TxnId, committed: bool) -> Vec<PageId> {
    let (wpl, pool) = split(state);
    let pages = wpl.deferred.before.remove(&txn).unwrap_or_default();
    let mut changed = Vec::with_capacity(pages.len());
    for (page, before) in pages {
        wpl.deferred.changer.remove(&page);
        if !committed {
            let frame = pool.get_mut(page).expect("a pinned page stays in the pool");
            frame.copy_from_slice(&before.bytes);
            if before.dirty {
                pool.mark_dirty(page, page::lsn(&before.bytes));
            } else {
                pool.mark_clean(page);
            }
        }
        pool.unpin(page);
        changed.push(page);
    }
    changed
}

/// Writes `sphere` as one atomic write (see the module's comment). Each page is taken as the
/// pool holds it, or as `evicted` gives it, or, if a running transaction changed it since, as
/// its before-image. Subtransactions of the sphere still running (readers that joined it) are
/// not named: their own end comes later. Returns the EOS record's LSN.
pub(super) fn write_sphere(
    server: &Server,
    state: &mut State,
    sphere: Sphere,
    ends: Option<TxnId>,
    evicted: Option<(PageId, &[u8])>,
) -> Result<Lsn> {
    let writer = TxnId(state.next_txn);
    state.next_txn += 1;
    let subs: Vec<TxnId> = sphere
        .subs
        .iter()
        .copied()
        .filter(|sub| Some(*sub) == ends || !state.txns.contains_key(sub))
        .collect();
    let mut write = AfterImageWrite::new();
    {
        let (wpl, pool) = split(state);
        for &page in &sphere.pages {
            let mut image = match (evicted, wpl.deferred.changer.get(&page)) {
                (Some((p, bytes)), _) if p == page => bytes.to_vec(),
                (_, Some(txn)) => wpl.deferred.before[txn][&page].bytes.clone(),
                _ => pool
                    .get(page)
                    .expect("a page not yet logged stays in the pool until its sphere is written")
                    .to_vec(),
            };
            // The LSN field is the server's: the stored image carries none.
            page::set_lsn(&mut image, Lsn::ZERO);
            write.push_page(page, &image);
        }
    }
    write.durable_subs(subs);
    if let Some(txn) = ends {
        write.ends(txn);
    }
    // One page per record: a logged copy is found by its record's LSN.
    let records = write.records(1);
    debug_assert_eq!(records.len(), sphere.pages.len().max(1));
    let mut lsns = Vec::with_capacity(records.len());
    let mut prev = Lsn::ZERO;
    for record in &records {
        prev = server.log.append(Some(writer), prev, record)?;
        lsns.push(prev);
    }
    let eos = *lsns.last().expect("a write has its EOS record");
    let (wpl, pool) = split(state);
    for (&page, &lsn) in sphere.pages.iter().zip(&lsns) {
        wpl.table.logged(page, writer, lsn);
        wpl.table.commit(page, writer, eos);
        let evicted_here = evicted.is_some_and(|(p, _)| p == page);
        match wpl.deferred.changer.get(&page) {
            // A running transaction's change is in the pool: its before-image is the copy
            // just logged, which an abort puts back as such.
            Some(txn) => {
                let before = wpl
                    .deferred
                    .before
                    .get_mut(txn)
                    .and_then(|pages| pages.get_mut(&page))
                    .expect("the changer keeps a before-image");
                page::set_lsn(&mut before.bytes, lsn);
                before.dirty = true;
            }
            None if !evicted_here => {
                // The pool holds the copy just logged: it goes home once the write is
                // durable (eviction or checkpoint), as a committed copy of whole-page logging.
                let frame = pool.get_mut(page).expect("checked above");
                page::set_lsn(frame, lsn);
                pool.mark_dirty(page, lsn);
            }
            None => {}
        }
    }
    state.stats.after_image_writes += 1;
    state.stats.after_images_written += sphere.pages.len() as u64;
    state.stats.page_images_logged += sphere.pages.len() as u64;
    Ok(eos)
}
