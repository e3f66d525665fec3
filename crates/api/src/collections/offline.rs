//! `check` of a closed store walking its collections: every tree's order, key bounds and
//! depth as `check` verifies them in a transaction, and no node that no tree reaches. Reads
//! the collection objects of the store (as it lies, or as recovery would leave it) into memory
//! and serves the tree's reads from there.

use super::header::Meta;
use super::tree::{NodeReader, Tree};
use lodestore_core::{Error, Oid as RawOid, Result, TypeId};
use lodestore_server::check::{CheckReport, Problem};
use lodestore_server::inspect;
use lodestore_storage::Volume;
use std::collections::{BTreeMap, BTreeSet};

/// Collection objects by OID, and the OIDs a walk asked for.
struct Objects {
    by_oid: BTreeMap<RawOid, (TypeId, Vec<u8>)>,
    asked: BTreeSet<RawOid>,
}

impl NodeReader for Objects {
    fn object_bytes(&mut self, oid: RawOid, expected: Option<(TypeId, usize)>) -> Result<&[u8]> {
        self.asked.insert(oid);
        let (type_id, bytes) = self.by_oid.get(&oid).ok_or(Error::ObjectNotFound { oid })?;
        if let Some((want, len)) = expected {
            if *type_id != want || bytes.len() != len {
                return Err(Error::TypeMismatch {
                    oid,
                    expected: want,
                    expected_len: len as u64,
                    found: *type_id,
                    found_len: bytes.len() as u64,
                });
            }
        }
        Ok(bytes)
    }
}

/// Walks every collection of `volume`, adding what is wrong to `report` and a summary to its
/// notes.
pub(crate) fn check_collections(volume: &Volume, report: &mut CheckReport) -> Result<()> {
    let mut objects = Objects {
        by_oid: BTreeMap::new(),
        asked: BTreeSet::new(),
    };
    inspect::for_each_object(volume, |object| {
        if object.type_id.is_collection() {
            objects
                .by_oid
                .insert(object.oid, (object.type_id, object.bytes));
        }
        Ok(())
    })?;
    let headers: Vec<RawOid> = objects
        .by_oid
        .iter()
        .filter(|(_, (type_id, _))| *type_id == TypeId::COLLECTION)
        .map(|(oid, _)| *oid)
        .collect();
    let path = report.path.clone();
    let mut problem = |oid: RawOid, message: String| {
        report.problems.push(Problem {
            page: Some(oid.page().0),
            message: format!("{path}: page {}: {message}", oid.page()),
        });
    };
    let (mut trees, mut entries) = (0u64, 0u64);
    for header in headers {
        let (_, bytes) = &objects.by_oid[&header];
        // `decode` refuses a header of another length.
        let meta = match Meta::decode(bytes) {
            Ok(meta) => meta,
            Err(reason) => {
                problem(
                    header,
                    format!("collection {header}: damaged header: {reason}"),
                );
                continue;
            }
        };
        let tree = Tree {
            header,
            kinds: (meta.key_kind, meta.value_kind),
        };
        match tree.check(&mut objects) {
            Ok(found) => {
                trees += 1;
                entries += found.entries;
            }
            // The error names the collection; the problem's page is the damaged node's.
            Err(e @ Error::CorruptCollection { node, .. }) => problem(node, e.to_string()),
            Err(e) => problem(header, format!("collection {header}: {e}")),
        }
    }
    let orphans: Vec<RawOid> = objects
        .by_oid
        .iter()
        .filter(|(oid, (type_id, _))| {
            *type_id == TypeId::COLLECTION_NODE && !objects.asked.contains(oid)
        })
        .map(|(oid, _)| *oid)
        .collect();
    for orphan in orphans {
        problem(
            orphan,
            format!("collection node {orphan} belongs to no collection (its space is lost)"),
        );
    }
    if trees > 0 {
        report
            .notes
            .push(format!("{trees} collections checked, {entries} entries"));
    }
    Ok(())
}
