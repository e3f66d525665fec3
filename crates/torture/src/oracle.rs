//! The oracle: does the recovered store hold exactly what it should?

use crate::{collection, CampaignReport, Delta, Model, Subject};
use lodestore::{AsOf, Error, FileSystem, RawOid, Session, Store};
use rand::rngs::StdRng;
use std::sync::Arc;

pub enum Failure {
    /// The store reported a problem by name (an error or a `check` finding). Acceptable only
    /// after a media fault.
    Detected(String),
    /// The store returned data that differs from what was committed. Never acceptable.
    Wrong(String),
}

/// What a verification found about the commits that were in flight at the crash.
pub struct InFlight {
    pub cut: u64,
    pub survived: u64,
}

/// Compares the store's objects with the model: equal to the acknowledged commits plus some
/// of the commits in flight at the crash, each whole, applied in the order they were appended.
/// Makes the matching model the committed one.
pub fn verify(
    store: &Store,
    subject: &mut Subject,
    report: &mut CampaignReport,
) -> Result<InFlight, Failure> {
    // A restart that left its pages to the next checkpoint left the data file behind the
    // store: read what a crash right now would recover instead (the same log replayed once
    // more, in memory), which is what the open store must hold too.
    let deferred_view = if store.restart_report().checkpoint_deferred {
        let fs: Arc<dyn FileSystem> = subject.fs.clone();
        Some(
            lodestore::recover_in_memory(fs, &subject.path).map_err(|e| {
                Failure::Detected(format!("recovering the store again in memory failed: {e}"))
            })?,
        )
    } else {
        None
    };
    let files: &dyn FileSystem = match &deferred_view {
        Some(view) => view.file_system(),
        None => subject.fs.as_ref(),
    };
    let mut stored = Model::new();
    lodestore::objects(files, &subject.path, |object| {
        stored.insert(object.oid, object.bytes);
        Ok(())
    })
    .map_err(|e| Failure::Detected(format!("reading the recovered store failed: {e}")))?;
    if let Some(map) = subject.map {
        let read = || {
            let mut session = store.session()?;
            let mut txn = session.begin()?;
            let found = collection::read_all(&mut txn, map)?;
            txn.abort()?;
            Ok::<_, Error>(found)
        };
        let (entries, tree) = read().map_err(|e| {
            Failure::Detected(format!("reading the recovered collection failed: {e}"))
        })?;
        report.collection_checks += 1;
        report.collection_entries_max = report.collection_entries_max.max(tree.entries);
        report.collection_height_max = report.collection_height_max.max(tree.height);
        if std::env::var_os("LODESTORE_TORTURE_TRACE").is_some() {
            eprintln!("verify: collection {:?}: {tree:?}", map.oid());
        }
        stored.extend(entries);
    }
    let report = lodestore::check(files, &subject.path)
        .map_err(|e| Failure::Detected(format!("check could not run: {e}")))?;
    if !report.is_sound() {
        let first: Vec<String> = report
            .problems
            .iter()
            .take(3)
            .map(|p| p.message.clone())
            .collect();
        return Err(Failure::Detected(format!(
            "check found {} problems after recovery: {}",
            report.problems.len(),
            first.join("; ")
        )));
    }
    let in_flight = std::mem::take(&mut subject.in_flight);
    assert!(
        in_flight.len() <= IN_FLIGHT_MAX,
        "{} commits in flight at once",
        in_flight.len()
    );
    let cut = in_flight.len() as u64;
    // Every subset, the empty one (nothing in flight survived) first.
    for subset in 0u32..(1 << in_flight.len()) {
        let mut candidate = subject.committed.clone();
        for (i, delta) in in_flight.iter().enumerate() {
            if subset & (1 << i) != 0 {
                apply(&mut candidate, delta);
            }
        }
        if candidate == stored {
            subject.committed = candidate;
            return Ok(InFlight {
                cut,
                survived: u64::from(subset.count_ones()),
            });
        }
    }
    if std::env::var_os("LODESTORE_TORTURE_TRACE").is_some() {
        let show = |m: &Model| -> Vec<String> { m.keys().map(|k| format!("{k:?}")).collect() };
        eprintln!("committed: {:?}", show(&subject.committed));
        eprintln!("stored:    {:?}", show(&stored));
        for delta in &in_flight {
            let keys: Vec<String> = delta
                .iter()
                .map(|(k, v)| format!("{k:?}{}", if v.is_some() { "+" } else { "-" }))
                .collect();
            eprintln!("in flight: {keys:?}");
        }
    }
    let whom = if in_flight.is_empty() {
        "the acknowledged commits".to_string()
    } else {
        format!(
            "the acknowledged commits plus any whole subset of the {} commits in flight",
            in_flight.len()
        )
    };
    Err(Failure::Wrong(format!(
        "recovered store matches neither {whom}: {}",
        difference(&subject.committed, &stored)
    )))
}

/// Commits in flight together at most: the oracle tries every subset of them.
pub const IN_FLIGHT_MAX: usize = 16;

/// Applies a transaction's changes: `Some` writes an object, `None` frees it.
pub fn apply(model: &mut Model, delta: &Delta) {
    for (oid, bytes) in delta {
        match bytes {
            Some(bytes) => {
                model.insert(*oid, bytes.clone());
            }
            None => {
                model.remove(oid);
            }
        }
    }
}

/// What turns `before` into `after`.
pub fn delta_between(before: &Model, after: &Model) -> Delta {
    let mut delta = Delta::new();
    for (oid, bytes) in after {
        if before.get(oid) != Some(bytes) {
            delta.insert(*oid, Some(bytes.clone()));
        }
    }
    for oid in before.keys() {
        if !after.contains_key(oid) {
            delta.insert(*oid, None);
        }
    }
    delta
}

/// The first few keys of `expected` missing from `found`, of `found` not in `expected`, and
/// of both with other bytes, each shown by `show`.
pub(crate) fn differing<K>(
    expected: &Model,
    found: &Model,
    show: impl Fn(RawOid) -> K,
) -> [Vec<K>; 3] {
    const SHOWN: usize = 3;
    let missing = expected
        .keys()
        .filter(|k| !found.contains_key(k))
        .take(SHOWN)
        .map(|k| show(*k))
        .collect();
    let extra = found
        .keys()
        .filter(|k| !expected.contains_key(k))
        .take(SHOWN)
        .map(|k| show(*k))
        .collect();
    let changed = expected
        .iter()
        .filter(|(k, v)| found.get(k).is_some_and(|f| f != *v))
        .take(SHOWN)
        .map(|(k, _)| show(*k))
        .collect();
    [missing, extra, changed]
}

fn difference(expected: &Model, stored: &Model) -> String {
    let [missing, extra, changed] = differing(expected, stored, |oid| oid);
    format!(
        "{} objects expected, {} stored; missing {missing:?}, unexpected {extra:?}, changed {changed:?}",
        expected.len(),
        stored.len()
    )
}

/// Checks the snapshot history and every acknowledged snapshot against what was committed
/// before it; settles a snapshot whose taking the crash cut (it is there or not, whole).
pub fn verify_snapshots(
    store: &Store,
    subject: &mut Subject,
    _rng: &mut StdRng,
    report: &mut CampaignReport,
) -> Result<(), Failure> {
    // A media fault may have left the archive unusable: the store serves the present and
    // says so, naming it, which is all that can be asked after such damage.
    if let Some(reason) = store
        .snapshot_stats()
        .and_then(|stats| stats.archive_unavailable)
    {
        return Err(Failure::Detected(format!(
            "the snapshot archive is unusable: {reason}"
        )));
    }
    let listed: Vec<u64> = store
        .snapshots()
        .map_err(|e| Failure::Detected(format!("listing the snapshots failed: {e}")))?
        .iter()
        .map(|s| s.id)
        .collect();
    if let Some(model) = subject.snapshot_in_flight.take() {
        report.snapshots_in_flight += 1;
        if listed.len() == subject.snapshots.len() + 1 {
            let id = *listed.last().expect("one more than acknowledged");
            subject.snapshots.push((id, model));
            report.snapshots_in_flight_survived += 1;
        }
    }
    if let Some(id) = subject.deletion_in_flight.take() {
        if !listed.contains(&id) {
            subject.snapshots.retain(|(kept, _)| *kept != id);
        }
    }
    let expected: Vec<u64> = subject.snapshots.iter().map(|(id, _)| *id).collect();
    if listed != expected {
        return Err(Failure::Wrong(format!(
            "the store lists snapshots {listed:?}; acknowledged were {expected:?}"
        )));
    }
    let mut session = store
        .session()
        .map_err(|e| Failure::Detected(format!("a session for reading snapshots failed: {e}")))?;
    for (id, model) in &subject.snapshots {
        compare_as_of(&mut session, *id, model, &subject.committed, subject.map)?;
        report.snapshots_verified += 1;
    }
    Ok(())
}

/// Reads snapshot `id` and compares it with `model`: every object of the model with its
/// bytes, no object of `also` that the model lacks, and the collection's entries.
pub fn compare_as_of(
    session: &mut Session,
    id: u64,
    model: &Model,
    also: &Model,
    map: Option<collection::Map>,
) -> Result<(), Failure> {
    let detected =
        |what: String, e: Error| Failure::Detected(format!("snapshot {id}: {what}: {e}"));
    let mut txn = session
        .begin_as_of(AsOf::Snapshot(id))
        .map_err(|e| detected("beginning a read as of it failed".into(), e))?;
    for oid in model
        .keys()
        .chain(also.keys().filter(|k| !model.contains_key(k)))
        .filter(|k| !collection::is_pseudo(**k))
    {
        match (txn.read_all(*oid), model.get(oid)) {
            (Ok(bytes), Some(expected)) if &bytes == expected => {}
            (Ok(bytes), Some(expected)) => {
                return Err(Failure::Wrong(format!(
                    "snapshot {id}: object {oid} reads {} bytes that differ from the {} \
                     committed before the snapshot",
                    bytes.len(),
                    expected.len()
                )))
            }
            // The slot held one of Lodestore's own objects then (a collection's node
            // since freed), not an application object.
            (Ok(_), None) if txn.info(*oid).is_ok_and(|info| info.type_id.is_reserved()) => {}
            (Ok(_), None) => {
                return Err(Failure::Wrong(format!(
                    "snapshot {id}: object {oid} exists as of it but was not committed before it"
                )))
            }
            (Err(Error::ObjectNotFound { .. }), None) => {}
            (Err(e), _) => return Err(detected(format!("reading object {oid}"), e)),
        }
    }
    if let Some(map) = map {
        let (found, _) = collection::read_all(&mut txn, map)
            .map_err(|e| detected("reading the collection as of it".into(), e))?;
        let expected = collection::of_model(model);
        if found != expected {
            return Err(Failure::Wrong(format!(
                "snapshot {id}: the collection as of it differs from what was committed \
                 before it: {}",
                collection::difference(&expected, &found)
            )));
        }
    }
    txn.finish()
        .map_err(|e| detected("ending the read failed".into(), e))
}
