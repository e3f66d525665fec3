//! Commuting increments run by the page server as a whole subtransaction (multi-level
//! transactions, Hasse & Weikum section 2): the operation travels to the pages, not the pages
//! to a client cache and back. Its level-0 part is the same as a client's: exclusive page
//! locks held to the subtransaction's end, the level-1 undo note before the commit record,
//! the changed pages diffed and logged by the server. What it saves is the client cache's
//! work between the page lock's grant and its release (revalidating the frame, tracking the
//! write, diffing and shipping), so a hot page's lock is held for less time.

use crate::batch::PageUpdates;
use crate::interface::{LockMode, OperationNote, PageServer, ShippedPage, TxnKind};
use lodestore_core::{Error, Oid, PageId, Result, TxnId};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::slotted;
use std::ops::Range;

/// At most this many increments in one subtransaction run at the server; more run in the
/// client (its cache is made for many pages).
pub const INCREMENTS_MAX: usize = 64;

/// Adds `delta` to the little-endian `i64` at byte `offset` of small object `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldIncrement {
    pub object: Oid,
    pub offset: u32,
    pub delta: i64,
}

/// How a run of increments at the server ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IncrementsRan {
    /// Committed as subtransaction `sub`; the fields' new values, in order.
    Committed { sub: TxnId, values: Vec<i64> },
    /// Nothing done: an object is large (its bytes are not on its page), or there are more
    /// than [`INCREMENTS_MAX`]. The caller runs the operation itself.
    NotHere,
}

/// Runs `fields` as one subtransaction of `parent` through `server`'s ordinary requests:
/// begin, lock and fetch each page (in page order), add, note `undo`, ship the pages and
/// commit, forced with `force` (strategy S2) or only appended (S2/PS). Any error aborts the
/// subtransaction, leaving nothing of it.
pub fn run_in_steps<S: PageServer + ?Sized>(
    server: &S,
    parent: TxnId,
    fields: &[FieldIncrement],
    undo: OperationNote<'_>,
    force: bool,
) -> Result<IncrementsRan> {
    if fields.len() > INCREMENTS_MAX {
        return Ok(IncrementsRan::NotHere);
    }
    let sub = server.begin_transaction(TxnKind::Sub { parent })?;
    run_in_steps_as(server, sub, fields, undo, force)
}

/// [`run_in_steps`] in subtransaction `sub`, begun already (page locks it holds are asked for
/// again, which grants them at once).
pub fn run_in_steps_as<S: PageServer + ?Sized>(
    server: &S,
    sub: TxnId,
    fields: &[FieldIncrement],
    undo: OperationNote<'_>,
    force: bool,
) -> Result<IncrementsRan> {
    let ran = (|| {
        let mut pages = pages_of(fields);
        for (page, image) in &mut pages {
            image.resize(server.page_size(), 0);
            server.lock_and_fetch_page(sub, *page, LockMode::Exclusive, image)?;
        }
        let Some(values) = add_to_images(&mut pages, fields)? else {
            return Ok(None);
        };
        server.note_operation(sub, undo)?;
        let shipped = unlogged(&pages);
        if force {
            server.ship_and_commit(sub, &shipped)?;
        } else {
            server.ship_and_commit_unforced(sub, &shipped)?;
        }
        Ok(Some(values))
    })();
    match ran {
        Ok(Some(values)) => Ok(IncrementsRan::Committed { sub, values }),
        Ok(None) => {
            server.abort(sub)?;
            Ok(IncrementsRan::NotHere)
        }
        Err(e) => {
            let _ = server.abort(sub);
            Err(e)
        }
    }
}

/// The changed page images as shipped pages, unlogged: the server diffs and logs them.
pub fn unlogged(pages: &[(PageId, Vec<u8>)]) -> Vec<ShippedPage<'_>> {
    pages
        .iter()
        .map(|(page, image)| ShippedPage {
            page: *page,
            image,
            logged: false,
        })
        .collect()
}

/// The distinct pages of `fields`' objects, in page order, each with an empty image.
pub fn pages_of(fields: &[FieldIncrement]) -> Vec<(PageId, Vec<u8>)> {
    let mut pages: Vec<PageId> = fields.iter().map(|f| f.object.page()).collect();
    pages.sort_unstable();
    pages.dedup();
    pages.into_iter().map(|p| (p, Vec::new())).collect()
}

/// Adds every field on the page images (`pages_of`, filled); the new values, or `None` when an
/// object is large. An error (no such object, a field out of bounds, an overflow, a reserved
/// type) may leave the images half changed: the caller discards them.
pub fn add_to_images(
    pages: &mut [(PageId, Vec<u8>)],
    fields: &[FieldIncrement],
) -> Result<Option<Vec<i64>>> {
    let mut values = Vec::with_capacity(fields.len());
    for field in fields {
        let at = pages
            .binary_search_by_key(&field.object.page(), |(page, _)| *page)
            .expect("every field's page is listed");
        let image = &mut pages[at].1;
        let Some(range) = field_range(image, field)? else {
            return Ok(None);
        };
        values.push(add_at(&mut image[range], field)?);
    }
    Ok(Some(values))
}

/// The byte changes `fields` make, as log records against the pages `frame` shows (every
/// field's page, unchanged by this), with the fields' new values in order; `None` when an
/// object is large. Fields of one object less than `gap` bytes apart share a record, as the
/// page diff would merge them; a field added twice sees its first addition. Nothing is
/// changed, so an error leaves nothing to discard.
pub fn field_updates<'a>(
    frame: impl Fn(PageId) -> &'a [u8],
    fields: &[FieldIncrement],
    gap: usize,
) -> Result<Option<(PageUpdates, Vec<i64>)>> {
    // Each field's byte range, then the records: per object, its fields' ranges merged.
    let mut ranges = Vec::with_capacity(fields.len());
    for field in fields {
        let Some(range) = field_range(frame(field.object.page()), field)? else {
            return Ok(None);
        };
        ranges.push((field.object, range));
    }
    let mut records: Vec<(Oid, Range<usize>)> = ranges.clone();
    records.sort_unstable_by_key(|(oid, range)| (oid.page(), range.start));
    records.dedup_by(|next, kept| {
        let merge = next.0 == kept.0 && next.1.start <= kept.1.end + gap;
        if merge {
            kept.1.end = kept.1.end.max(next.1.end);
        }
        merge
    });
    // The records' after bytes, one after another, added on in the fields' order.
    let mut afters = Vec::with_capacity(records.iter().map(|(_, r)| r.len()).sum());
    for (oid, range) in &records {
        afters.extend_from_slice(&frame(oid.page())[range.clone()]);
    }
    let mut values = Vec::with_capacity(fields.len());
    for (field, (oid, range)) in fields.iter().zip(&ranges) {
        let mut at = 0;
        let record = records
            .iter()
            .find(|(o, r)| {
                let found = o == oid && r.start <= range.start && range.end <= r.end;
                if !found {
                    at += r.len();
                }
                found
            })
            .expect("every field's range is in a record");
        let start = at + range.start - record.1.start;
        values.push(add_at(&mut afters[start..start + range.len()], field)?);
    }
    // Only the bytes that changed are logged, as the page diff would: a delta of 0 leaves no
    // record, and a small one changes only the low bytes of a field.
    let mut updates = PageUpdates::with_capacity(records.len(), 2 * afters.len());
    let mut at = 0;
    for (oid, range) in &records {
        let before = &frame(oid.page())[range.clone()];
        let after = &afters[at..at + range.len()];
        at += range.len();
        let Some(first) = (0..before.len()).find(|&i| before[i] != after[i]) else {
            continue;
        };
        let end = (first..before.len())
            .rev()
            .find(|&i| before[i] != after[i])
            .map_or(first, |last| last + 1);
        let start = (range.start + first) as u32;
        updates.push(oid.page(), start, &before[first..end], &after[first..end]);
    }
    Ok(Some((updates, values)))
}

/// Where `field`'s eight bytes are on `image`, the page of its object; `None` when the object
/// is large.
fn field_range(image: &[u8], field: &FieldIncrement) -> Result<Option<Range<usize>>> {
    let oid = field.object;
    if page::kind(image) != Some(PageKind::Slotted) {
        return Err(Error::ObjectNotFound { oid });
    }
    let record = slotted::record(image, oid.slot())
        .map_err(|reason| Error::CorruptPage {
            path: "page server".into(),
            page: oid.page(),
            reason,
        })?
        .ok_or(Error::ObjectNotFound { oid })?;
    if record.large {
        return Ok(None);
    }
    if record.type_id.is_reserved() {
        return Err(Error::InvalidArgument(format!(
            "object {oid} belongs to Lodestore and cannot be changed directly"
        )));
    }
    let payload = record.payload();
    let start = payload.start + field.offset as usize;
    if field.offset as usize + 8 > payload.len() {
        return Err(Error::OutOfBounds {
            oid,
            offset: u64::from(field.offset),
            end: u64::from(field.offset) + 8,
            len: payload.len() as u64,
        });
    }
    Ok(Some(start..start + 8))
}

/// Adds `field`'s delta to the little-endian `i64` in `bytes`; the new value.
fn add_at(bytes: &mut [u8], field: &FieldIncrement) -> Result<i64> {
    let now = i64::from_le_bytes((&*bytes).try_into().expect("8 bytes"))
        .checked_add(field.delta)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "adding {} to the field at byte {} of object {} overflows",
                field.delta, field.offset, field.object
            ))
        })?;
    bytes.copy_from_slice(&now.to_le_bytes());
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_core::TypeId;
    use proptest::prelude::*;

    const PAGE_SIZE: usize = 1024;

    /// Two slotted pages, each with objects of the given payload lengths filled with `fill`.
    fn pages(lengths: &[usize], fill: u8) -> Vec<(PageId, Vec<u8>)> {
        (1..=2)
            .map(|number| {
                let mut image = vec![0u8; PAGE_SIZE];
                slotted::init(&mut image, PageId(number), 1);
                for &len in lengths {
                    let slot = slotted::insert(&mut image, TypeId(5), len, false).expect("fits");
                    let record = slotted::record(&image, slot).unwrap().unwrap();
                    image[record.payload()].fill(fill);
                }
                (PageId(number), image)
            })
            .collect()
    }

    proptest! {
        /// Replaying the records `field_updates` gives, in order and each on the bytes the
        /// one before left, turns the pages into what adding on copies of them makes; each
        /// record changes its first and last byte; the new values agree; an overflow is an
        /// error either way.
        #[test]
        fn field_records_replay_to_the_added_images(
            lengths in proptest::collection::vec(8usize..40, 1..5),
            fill in any::<u8>(),
            picks in proptest::collection::vec(
                (1u32..=2, any::<prop::sample::Index>(), any::<prop::sample::Index>(),
                 prop_oneof![Just(0i64), -300i64..300, any::<i64>()]),
                1..12,
            ),
            gap in 0usize..24,
        ) {
            let frames = pages(&lengths, fill);
            let fields: Vec<FieldIncrement> = picks
                .iter()
                .map(|(page, object, offset, delta)| {
                    let slot = object.index(lengths.len()) as u16;
                    let len = lengths[slot as usize];
                    FieldIncrement {
                        object: Oid::new(1, PageId(*page), slot),
                        offset: offset.index(len - 7) as u32,
                        delta: *delta,
                    }
                })
                .collect();
            let mut added = pages_of(&fields);
            for (page, image) in &mut added {
                image.extend_from_slice(&frames[page.0 as usize - 1].1);
            }
            let frame = |page: PageId| frames[page.0 as usize - 1].1.as_slice();
            match (add_to_images(&mut added, &fields), field_updates(frame, &fields, gap)) {
                (Ok(Some(values)), Ok(Some((records, also)))) => {
                    prop_assert_eq!(values, also);
                    let mut replayed = frames.clone();
                    for record in records.iter() {
                        let image = &mut replayed[record.page.0 as usize - 1].1;
                        let at = record.offset as usize..record.offset as usize + record.after.len();
                        prop_assert_eq!(&image[at.clone()], record.before);
                        prop_assert!(record.before.first() != record.after.first());
                        prop_assert!(record.before.last() != record.after.last());
                        image[at].copy_from_slice(record.after);
                    }
                    for (page, image) in &added {
                        prop_assert_eq!(&replayed[page.0 as usize - 1].1, image);
                    }
                }
                (Err(_), Err(_)) => {}
                (images, records) => prop_assert!(
                    false,
                    "images {:?}, records {:?}",
                    images.map(|v| v.is_some()),
                    records.map(|r| r.is_some())
                ),
            }
        }
    }

    /// A field past its object's end is refused by name, and nothing comes back to apply.
    #[test]
    fn a_field_past_the_object_is_out_of_bounds() {
        let frames = pages(&[16], 0);
        let field = FieldIncrement {
            object: Oid::new(1, PageId(1), 0),
            offset: 9,
            delta: 1,
        };
        let frame = |page: PageId| frames[page.0 as usize - 1].1.as_slice();
        let error = field_updates(frame, &[field], 0).unwrap_err();
        assert!(
            matches!(
                error,
                Error::OutOfBounds {
                    offset: 9,
                    end: 17,
                    len: 16,
                    ..
                }
            ),
            "{error}"
        );
    }
}
