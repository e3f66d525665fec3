//! Commuting increments run by the page server as a whole subtransaction (multi-level
//! transactions, Hasse & Weikum section 2): the operation travels to the pages, not the pages
//! to a client cache and back. Its level-0 part is the same as a client's: exclusive page
//! locks held to the subtransaction's end, the level-1 undo note before the commit record,
//! the changed pages diffed and logged by the server. What it saves is the client cache's
//! work between the page lock's grant and its release (revalidating the frame, tracking the
//! write, diffing and shipping), so a hot page's lock is held for less time.

use crate::interface::{LockMode, OperationNote, PageServer, ShippedPage, TxnKind};
use lodestore_core::{Error, Oid, PageId, Result, TxnId};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::slotted;

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
        let oid = field.object;
        let at = pages
            .binary_search_by_key(&oid.page(), |(page, _)| *page)
            .expect("every field's page is listed");
        let image = &mut pages[at].1;
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
        let payload = &mut image[record.payload()];
        let (start, len) = (field.offset as usize, payload.len());
        let bytes = payload
            .get_mut(start..start + 8)
            .ok_or(Error::OutOfBounds {
                oid,
                offset: u64::from(field.offset),
                end: u64::from(field.offset) + 8,
                len: len as u64,
            })?;
        let now = i64::from_le_bytes((&*bytes).try_into().expect("8 bytes"))
            .checked_add(field.delta)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "adding {} to the field at byte {} of object {oid} overflows",
                    field.delta, field.offset
                ))
            })?;
        bytes.copy_from_slice(&now.to_le_bytes());
        values.push(now);
    }
    Ok(Some(values))
}
