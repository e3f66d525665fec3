//! The oracle: does the recovered store hold exactly what it should?

use crate::{Delta, Model, Subject};
use lodestore::RawOid;

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
pub fn verify(subject: &mut Subject) -> Result<InFlight, Failure> {
    let mut stored = Model::new();
    lodestore::objects(subject.fs.as_ref(), &subject.path, |object| {
        stored.insert(object.oid, object.bytes);
        Ok(())
    })
    .map_err(|e| Failure::Detected(format!("reading the recovered store failed: {e}")))?;
    let report = lodestore::check(subject.fs.as_ref(), &subject.path)
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

fn difference(expected: &Model, stored: &Model) -> String {
    let missing: Vec<RawOid> = expected
        .keys()
        .filter(|k| !stored.contains_key(k))
        .take(3)
        .copied()
        .collect();
    let extra: Vec<RawOid> = stored
        .keys()
        .filter(|k| !expected.contains_key(k))
        .take(3)
        .copied()
        .collect();
    let changed: Vec<RawOid> = expected
        .iter()
        .filter(|(k, v)| stored.get(k).is_some_and(|s| s != *v))
        .take(3)
        .map(|(k, _)| *k)
        .collect();
    format!(
        "{} objects expected, {} stored; missing {missing:?}, unexpected {extra:?}, changed {changed:?}",
        expected.len(),
        stored.len()
    )
}
