//! The oracle: does the recovered store hold exactly what it should?

use crate::{Model, Subject};
use lodestore::RawOid;

pub enum Failure {
    /// The store reported a problem by name (an error or a `check` finding). Acceptable only
    /// after a media fault.
    Detected(String),
    /// The store returned data that differs from what was committed. Never acceptable.
    Wrong(String),
}

/// Compares the store's objects with the model: equal to the acknowledged commits, or to them
/// plus the one in-flight commit. Returns whether the in-flight commit survived, and makes the
/// matching model the committed one.
pub fn verify(subject: &mut Subject) -> Result<bool, Failure> {
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
    let in_flight = subject.in_flight.take();
    if stored == subject.committed {
        return Ok(false);
    }
    if let Some(in_flight) = in_flight {
        if stored == in_flight {
            subject.committed = in_flight;
            return Ok(true);
        }
        return Err(Failure::Wrong(format!(
            "recovered store matches neither the acknowledged commits nor them plus the \
             in-flight commit: {}",
            difference(&subject.committed, &stored)
        )));
    }
    Err(Failure::Wrong(format!(
        "recovered store differs from the acknowledged commits: {}",
        difference(&subject.committed, &stored)
    )))
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
