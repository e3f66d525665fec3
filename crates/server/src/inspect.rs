//! Reading a closed store object by object: what `lodestore info` and `lodestore dump` show.

use lodestore_core::{Error, Oid, PageId, Result, TypeId};
use lodestore_multilevel::strategy::Strategy;
use lodestore_storage::large::{self, Descriptor};
use lodestore_storage::page::PageKind;
use lodestore_storage::superblock::STORE_FORMAT_VERSION;
use lodestore_storage::{directory, slotted, spacemap, Volume};
use serde::Serialize;
use std::collections::BTreeMap;

/// One object as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredObject {
    pub oid: Oid,
    pub type_id: TypeId,
    pub large: bool,
    pub bytes: Vec<u8>,
}

/// Visits every object of the volume in OID order, Lodestore's own objects included. The
/// first damaged page ends the walk with its error.
pub fn for_each_object(
    volume: &Volume,
    visit: impl FnMut(StoredObject) -> Result<()>,
) -> Result<()> {
    for_each_readable_object(volume, visit, Err)
}

/// Visits every object of the volume that can be read, in OID order. A damaged page (a bad
/// checksum or structure: `Error::CorruptPage`) is passed to `damaged`, which may go on past it
/// (return `Ok`) or stop; the objects on it, or the large object that reaches it, are skipped.
/// Other errors (I/O) end the walk.
pub fn for_each_readable_object(
    volume: &Volume,
    mut visit: impl FnMut(StoredObject) -> Result<()>,
    mut damaged: impl FnMut(Error) -> Result<()>,
) -> Result<()> {
    let page_size = volume.page_size();
    let mut buf = vec![0u8; page_size];
    for p in directory::DIRECTORY_PAGE.0..volume.page_count() {
        let id = PageId(p);
        if spacemap::is_map_page(id, page_size) {
            continue;
        }
        match volume.read_page(id, &mut buf) {
            Ok(PageKind::Slotted) => {}
            Ok(_) => continue,
            Err(error @ Error::CorruptPage { .. }) => {
                damaged(error)?;
                continue;
            }
            Err(error) => return Err(error),
        }
        for slot in slotted::live_slots(&buf).collect::<Vec<_>>() {
            let oid = Oid::new(volume.volume_id(), id, slot);
            let record = match slotted::record(&buf, slot) {
                Ok(Some(record)) => record,
                Ok(None) => continue,
                Err(reason) => {
                    damaged(volume.corrupt(id, reason))?;
                    continue;
                }
            };
            let payload = &buf[record.payload()];
            let bytes = if record.large {
                match read_large(volume, oid, payload) {
                    Ok(bytes) => bytes,
                    Err(error @ Error::CorruptPage { .. }) => {
                        damaged(error)?;
                        continue;
                    }
                    Err(error) => return Err(error),
                }
            } else {
                payload.to_vec()
            };
            visit(StoredObject {
                oid,
                type_id: record.type_id,
                large: record.large,
                bytes,
            })?;
        }
    }
    Ok(())
}

/// The bytes of the large object `oid` whose descriptor is `descriptor`.
pub fn read_large(volume: &Volume, oid: Oid, descriptor: &[u8]) -> Result<Vec<u8>> {
    let page_size = volume.page_size();
    let descriptor = Descriptor::decode(descriptor, page_size)
        .map_err(|reason| volume.corrupt(oid.page(), format!("object {oid}: {reason}")))?;
    let per_page = large::data_bytes_per_page(page_size);
    let mut bytes = Vec::with_capacity(descriptor.length as usize);
    let mut buf = vec![0u8; page_size];
    for page in descriptor.pages() {
        let kind = volume.read_page(page, &mut buf)?;
        if kind != PageKind::LargeData || large::owner(&buf) != oid {
            return Err(volume.corrupt(
                page,
                format!(
                    "expected large data of object {oid}, found a {} page owned by {}",
                    kind.name(),
                    large::owner(&buf)
                ),
            ));
        }
        let take = per_page.min(descriptor.length as usize - bytes.len());
        bytes.extend_from_slice(&buf[lodestore_storage::page::PAGE_HEADER_BYTES..][..take]);
    }
    Ok(bytes)
}

/// The named roots.
pub fn roots(volume: &Volume) -> Result<BTreeMap<String, Oid>> {
    let oid = volume.superblock().root_directory;
    let mut buf = vec![0u8; volume.page_size()];
    volume.read_page(oid.page(), &mut buf)?;
    let record = slotted::record(&buf, oid.slot())
        .map_err(|reason| volume.corrupt(oid.page(), reason))?
        .filter(|r| r.type_id == TypeId::ROOT_DIRECTORY && !r.large)
        .ok_or_else(|| volume.corrupt(oid.page(), "root directory object is missing"))?;
    directory::decode(&buf[record.payload()]).map_err(|reason| volume.corrupt(oid.page(), reason))
}

/// What `lodestore info` reports.
#[derive(Clone, Debug, Serialize)]
pub struct StoreInfo {
    pub path: String,
    pub format_version: u32,
    pub page_size: usize,
    /// The server's recovery method, by its name in the registry of methods.
    pub recovery_method: &'static str,
    pub pages: u64,
    pub pages_by_kind: BTreeMap<&'static str, u64>,
    pub objects: u64,
    pub large_objects: u64,
    pub object_bytes: u64,
    pub free_bytes: u64,
    pub roots: u64,
    pub last_lsn: u64,
    pub superblock_generation: u64,
    pub created_unix_seconds: u64,
    /// How multi-level transactions run unless a session says otherwise: s1, s2 or s2ps
    /// (`default s2ps` when the store never had one chosen).
    pub multi_level_strategy: String,
    /// A main-memory store's last checkpoint, backups and log streams.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differential: Option<crate::recovery::differential::inspect::DifferentialInfo>,
    /// The server's log from its last checkpoint, both levels (see `crate::log_inspect`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<crate::log_inspect::LogSummary>,
}

/// Gathers the figures `info` shows. Reads every page.
pub fn info(volume: &Volume) -> Result<StoreInfo> {
    let page_size = volume.page_size();
    let sb = volume.superblock();
    let mut pages_by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    pages_by_kind.insert(PageKind::Superblock.name(), 2);
    let mut free_bytes = 0u64;
    let mut buf = vec![0u8; page_size];
    for p in spacemap::FIRST_MAP_PAGE.0..volume.page_count() {
        let kind = volume.read_page(PageId(p), &mut buf)?;
        *pages_by_kind.entry(kind.name()).or_default() += 1;
        match kind {
            PageKind::Free => free_bytes += page_size as u64,
            PageKind::Slotted => free_bytes += slotted::free_bytes(&buf) as u64,
            _ => {}
        }
    }
    let (mut objects, mut large_objects, mut object_bytes) = (0u64, 0u64, 0u64);
    for_each_object(volume, |object| {
        if !object.type_id.is_reserved() {
            objects += 1;
            large_objects += u64::from(object.large);
            object_bytes += object.bytes.len() as u64;
        }
        Ok(())
    })?;
    Ok(StoreInfo {
        path: volume.path().display().to_string(),
        format_version: STORE_FORMAT_VERSION,
        page_size,
        recovery_method: crate::RecoveryMethodKind::from_code(sb.recovery_method).name(),
        pages: u64::from(volume.page_count()),
        pages_by_kind,
        objects,
        large_objects,
        object_bytes,
        free_bytes,
        roots: roots(volume)?.len() as u64,
        last_lsn: sb.last_lsn.0,
        superblock_generation: sb.generation,
        created_unix_seconds: sb.created_unix_seconds,
        multi_level_strategy: match Strategy::from_code(sb.multi_level_strategy) {
            Some(strategy) => strategy.name().to_string(),
            None => format!("default {}", Strategy::default()),
        },
        differential: None,
        log: None,
    })
}
