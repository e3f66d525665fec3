//! The OO1 object types (Cattell & Skeen 1992) as Hosking, Brown & Moss section 5.1 lay them
//! out: parts with their three outgoing connections stored inline, string fields as separate
//! small objects, and each part's incoming connections as a separate list object.

use crate::oo7::schema::OidList;
use bytemuck::{Pod, Zeroable};
use lodestore::{Oid, Persistent};

/// Outgoing connections per part.
pub const CONNECTIONS: usize = 3;

const TYPE_BASE: u32 = 0x0001_0000;

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Oo1Root {
    pub seed: u64,
    pub parts: u64,
    /// The part-number index.
    pub index: PartIndex,
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Part {
    /// The part number, 1 to the number of parts.
    pub id: u64,
    pub build_date: u64,
    /// The fields the update operation increments.
    pub x: i32,
    pub y: i32,
    pub kind: Oid<Text>,
    pub to: [Oid<Part>; CONNECTIONS],
    pub connection_kind: [Oid<Text>; CONNECTIONS],
    pub connection_length: [u32; CONNECTIONS],
    pub _pad: u32,
    /// An OID list of the parts connected to this one.
    pub incoming: Oid<OidList>,
}

/// A string field, stored as its own object.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Text {
    pub bytes: [u8; 16],
}

/// The part-number index: a collection from part number to part.
pub type PartIndex = lodestore::BTreeMap<u64, Oid<Part>>;

impl Persistent for Oo1Root {
    const TYPE_ID: u32 = TYPE_BASE + 1;
}
impl Persistent for Part {
    const TYPE_ID: u32 = TYPE_BASE + 2;
}
impl Persistent for Text {
    const TYPE_ID: u32 = TYPE_BASE + 3;
}
