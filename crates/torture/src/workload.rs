//! The workload of one crash point: a few transactions of allocations, frees, updates and
//! reads of small and large objects, committed or aborted, until the crash stops it.

use crate::{collection, CampaignReport, Model, Subject};
use lodestore::{Error, RawOid, Store, Transaction};
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::BTreeSet;

/// Objects the store keeps at most; past it the workload frees more than it allocates.
pub(crate) const OBJECTS_MAX: usize = 120;
/// Transactions of one session in one crash point's workload, at most.
pub(crate) const TRANSACTIONS_MAX: u32 = 8;
pub(crate) const OPERATIONS_MAX: u32 = 12;
pub(crate) const TYPE_ID: u32 = 77;

/// Why a transaction stopped early.
pub(crate) enum Stop {
    /// The simulated machine died: the workload ends here.
    Crashed,
    /// A retryable error: the transaction is aborted.
    Retry,
}

/// Runs transactions until the crash or the end of the workload. An error that is neither the
/// crash nor retryable is a violation.
pub fn run(
    store: &Store,
    subject: &mut Subject,
    rng: &mut StdRng,
    report: &mut CampaignReport,
    snapshots: bool,
) -> Result<(), String> {
    let mut session = match store.session() {
        Ok(session) => session,
        Err(_) if subject.fs.has_crashed() => return Ok(()),
        Err(e) => return Err(format!("session failed: {e}")),
    };
    let mut reserved = match reserve(&mut session, rng) {
        Ok(reserved) => {
            report.objects_reserved += reserved.as_ref().map_or(0, |r| r.oids.len() as u64);
            reserved
        }
        Err(_) if subject.fs.has_crashed() => return Ok(()),
        Err(e) => return Err(format!("reserving objects failed: {e}")),
    };
    for _ in 0..rng.random_range(1..=TRANSACTIONS_MAX) {
        if snapshots && !snapshot_step(store, &mut session, subject, rng, report)? {
            return Ok(());
        }
        let mut working = subject.committed.clone();
        let mut txn = match session.begin() {
            Ok(txn) => txn,
            Err(_) if subject.fs.has_crashed() => return Ok(()),
            Err(e) => return Err(format!("begin failed: {e}")),
        };
        if let Some(reserved) = &mut reserved {
            reserved.begin();
        }
        match operations(
            &mut txn,
            &mut working,
            reserved.as_mut(),
            subject.map,
            rng,
            report,
        ) {
            Ok(()) => {}
            Err(error) => match classify(error, subject)? {
                Stop::Crashed => return Ok(()),
                Stop::Retry => {
                    let _ = txn.abort();
                    report.aborts += 1;
                    continue;
                }
            },
        }
        // A snapshot while the transaction runs: it holds what was committed before, and
        // the pages this transaction already shipped must be read as they were.
        if snapshots
            && subject.snapshots.len() < SNAPSHOTS_MAX
            && rng.random_range(0..10) == 0
            && !take_snapshot(store, subject, report)?
        {
            return Ok(());
        }
        if rng.random_range(0..5) == 0 {
            match txn.abort() {
                Ok(()) => report.aborts += 1,
                Err(error) => match classify(error, subject)? {
                    Stop::Crashed => return Ok(()),
                    Stop::Retry => {}
                },
            }
            continue;
        }
        match txn.commit() {
            Ok(_) => {
                subject.committed = working;
                report.commits_acknowledged += 1;
                if let Some(reserved) = &mut reserved {
                    reserved.committed();
                }
            }
            Err(_) if subject.fs.has_crashed() => {
                subject.in_flight =
                    vec![crate::oracle::delta_between(&subject.committed, &working)];
                return Ok(());
            }
            Err(e) => return Err(format!("commit failed without a crash: {e}")),
        }
    }
    Ok(())
}

/// Objects a workload's session reserved ahead of their contents (`Session::reserve_zeroed`).
pub(crate) struct Reserved {
    oids: Vec<RawOid>,
    len: usize,
    /// Pages of them committed transactions formatted (their objects exist).
    formatted: BTreeSet<u32>,
    /// The same in the running transaction.
    formatted_working: BTreeSet<u32>,
}

impl Reserved {
    /// Bytes of each reserved object.
    pub(crate) fn object_len(&self) -> usize {
        self.len
    }

    /// Objects reserved.
    pub(crate) fn count(&self) -> usize {
        self.oids.len()
    }

    /// A transaction begins: it knows the pages committed ones formatted.
    pub(crate) fn begin(&mut self) {
        self.formatted_working = self.formatted.clone();
    }

    /// The transaction committed: the pages it formatted are formatted.
    pub(crate) fn committed(&mut self) {
        self.formatted = std::mem::take(&mut self.formatted_working);
    }

    /// A reserved object to fill, and, if its page is not formatted yet, every reserved
    /// object of the page (which the fill brings into being); the page counts as formatted
    /// for the rest of the transaction. `None` when the page is not formatted and
    /// `may_format` is false: a crowded store takes no more objects by the page, or the
    /// campaign's store would grow past its pool however many objects are freed.
    pub(crate) fn pick(
        &mut self,
        rng: &mut StdRng,
        may_format: bool,
    ) -> Option<(RawOid, Vec<RawOid>)> {
        let oid = self.oids[rng.random_range(0..self.oids.len())];
        let page = oid.page().0;
        if self.formatted_working.contains(&page) {
            return Some((oid, Vec::new()));
        }
        if !may_format {
            return None;
        }
        self.formatted_working.insert(page);
        let page_objects = self
            .oids
            .iter()
            .filter(|o| o.page().0 == page)
            .copied()
            .collect();
        Some((oid, page_objects))
    }
}

/// Objects reserved per workload at most.
const RESERVED_MAX: u64 = 40;

/// Half the time, reserves a few objects of one size for the session's transactions to fill.
pub(crate) fn reserve(
    session: &mut lodestore::Session,
    rng: &mut StdRng,
) -> lodestore::Result<Option<Reserved>> {
    if rng.random_range(0..2) == 0 {
        return Ok(None);
    }
    let len = rng.random_range(1..400);
    let count = rng.random_range(1..=RESERVED_MAX);
    let oids = session.reserve_zeroed(TYPE_ID, len as u64, count)?;
    Ok(Some(Reserved {
        oids,
        len,
        formatted: BTreeSet::new(),
        formatted_working: BTreeSet::new(),
    }))
}

/// Fills a reserved object: the first fill of a page brings every reserved object of the
/// page into being, zero-filled.
fn fill_reserved(
    txn: &mut Transaction<'_>,
    working: &mut Model,
    reserved: &mut Reserved,
    rng: &mut StdRng,
) -> lodestore::Result<()> {
    let may_format = objects(working).count() < OBJECTS_MAX;
    let Some((oid, page_objects)) = reserved.pick(rng, may_format) else {
        return Ok(());
    };
    // Formatted already: an ordinary write, if the object is still there at that size (it
    // may have been freed, and its OID reused by an object of another size).
    if page_objects.is_empty()
        && working
            .get(&oid)
            .is_none_or(|bytes| bytes.len() != reserved.len)
    {
        return Ok(());
    }
    for other in page_objects {
        working.insert(other, vec![0; reserved.len]);
    }
    let bytes: Vec<u8> = (0..reserved.len).map(|_| rng.random()).collect();
    txn.fill_bytes(oid, &bytes)?;
    working.insert(oid, bytes);
    Ok(())
}

/// Snapshots kept by one store of a campaign at most; past it the campaign starts a new store
/// (until snapshots can be deleted), so every check reads them all.
pub(crate) const SNAPSHOTS_MAX: usize = 8;

/// Sometimes takes a snapshot, reads one as of itself, deletes one, or archives snapshot
/// pages. `false`:
/// the crash came.
fn snapshot_step(
    store: &Store,
    session: &mut lodestore::Session,
    subject: &mut Subject,
    rng: &mut StdRng,
    report: &mut CampaignReport,
) -> Result<bool, String> {
    match rng.random_range(0..12) {
        0..2 if subject.snapshots.len() < SNAPSHOTS_MAX => {
            return take_snapshot(store, subject, report);
        }
        2..4 if !subject.snapshots.is_empty() => {
            let (id, model) = &subject.snapshots[rng.random_range(0..subject.snapshots.len())];
            match crate::oracle::compare_as_of(session, *id, model, &subject.committed, subject.map)
            {
                Ok(()) => report.as_of_reads += 1,
                Err(_) if subject.fs.has_crashed() => return Ok(false),
                Err(crate::oracle::Failure::Detected(m) | crate::oracle::Failure::Wrong(m)) => {
                    return Err(m)
                }
            }
        }
        5 if !subject.snapshots.is_empty() => {
            let (id, _) = subject.snapshots[rng.random_range(0..subject.snapshots.len())];
            match store.delete_snapshot(id) {
                Ok(_) => {
                    subject.snapshots.retain(|(kept, _)| *kept != id);
                    report.snapshots_deleted += 1;
                }
                Err(_) if subject.fs.has_crashed() => {
                    subject.deletion_in_flight = Some(id);
                    return Ok(false);
                }
                Err(e) => {
                    return Err(format!(
                        "deleting snapshot {id} failed without a crash: {e}"
                    ))
                }
            }
        }
        4 => match store.archive_snapshot_pages() {
            Ok(()) => {}
            Err(_) if subject.fs.has_crashed() => return Ok(false),
            Err(e) => {
                return Err(format!(
                    "archiving snapshot pages failed without a crash: {e}"
                ))
            }
        },
        _ => {}
    }
    Ok(true)
}

/// Takes a snapshot of what is committed; `false`: the crash came while it was taken.
fn take_snapshot(
    store: &Store,
    subject: &mut Subject,
    report: &mut CampaignReport,
) -> Result<bool, String> {
    match store.snapshot() {
        Ok(snapshot) => {
            subject
                .snapshots
                .push((snapshot.id, subject.committed.clone()));
            report.snapshots_taken += 1;
            Ok(true)
        }
        Err(_) if subject.fs.has_crashed() => {
            subject.snapshot_in_flight = Some(subject.committed.clone());
            Ok(false)
        }
        Err(e) => Err(format!("taking a snapshot failed without a crash: {e}")),
    }
}

fn classify(error: Error, subject: &Subject) -> Result<Stop, String> {
    if subject.fs.has_crashed() {
        Ok(Stop::Crashed)
    } else if error.is_retryable() {
        Ok(Stop::Retry)
    } else {
        Err(format!("operation failed without a crash: {error}"))
    }
}

/// The objects of the model, without the collection's entries.
fn objects(model: &Model) -> impl Iterator<Item = &RawOid> {
    model.keys().take_while(|oid| !collection::is_pseudo(**oid))
}

fn pick(model: &Model, rng: &mut StdRng) -> Option<RawOid> {
    let count = objects(model).count();
    if count == 0 {
        return None;
    }
    objects(model).nth(rng.random_range(0..count)).copied()
}

fn operations(
    txn: &mut Transaction<'_>,
    working: &mut Model,
    mut reserved: Option<&mut Reserved>,
    map: Option<collection::Map>,
    rng: &mut StdRng,
    report: &mut CampaignReport,
) -> lodestore::Result<()> {
    for _ in 0..rng.random_range(1..=OPERATIONS_MAX) {
        if let Some(reserved) = reserved.as_deref_mut() {
            if rng.random_range(0..4) == 0 {
                fill_reserved(txn, working, reserved, rng)?;
                report.reserved_fills += 1;
                continue;
            }
        }
        if let Some(map) = map {
            if rng.random_range(0..3) == 0 {
                report.collection_steps += 1;
                collection::step(txn, map, working, rng)?;
                continue;
            }
        }
        let crowded = objects(working).count() >= OBJECTS_MAX;
        match rng.random_range(0..100) {
            0..40 if !crowded => {
                let size = if rng.random_range(0..12) == 0 {
                    rng.random_range(5_000..30_000)
                } else {
                    rng.random_range(1..400)
                };
                let bytes: Vec<u8> = (0..size).map(|_| rng.random()).collect();
                let oid = txn.alloc_bytes(TYPE_ID, &bytes)?;
                working.insert(oid, bytes);
            }
            0..55 => {
                if let Some(oid) = pick(working, rng) {
                    txn.free(oid)?;
                    working.remove(&oid);
                }
            }
            55..90 => {
                if let Some(oid) = pick(working, rng) {
                    let bytes = working.get_mut(&oid).expect("picked");
                    let start = rng.random_range(0..bytes.len());
                    let end = rng.random_range(start..=bytes.len().min(start + 3000));
                    let patch: Vec<u8> = (start..end).map(|_| rng.random()).collect();
                    txn.write_at(oid, start as u64, &patch)?;
                    bytes[start..end].copy_from_slice(&patch);
                }
            }
            _ => {
                if let Some(oid) = pick(working, rng) {
                    let stored = txn.read_all(oid)?;
                    if stored != working[&oid] {
                        return Err(Error::InvalidArgument(format!(
                            "object {oid} reads back other bytes than the transaction wrote"
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}
