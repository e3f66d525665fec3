//! The OO7 object types as Lodestore stores them (Carey, DeWitt & Naughton 1993): plain-old-data
//! structs whose references are typed OIDs. Every association is kept in both directions: an
//! atomic part knows its composite part and its outgoing and incoming connections, a composite
//! part knows its document, its atomic parts and the base assemblies that use it, and so on.
//!
//! Fixed-size fan-outs (connections per atomic part, sub-assemblies per assembly, composite parts
//! per base assembly) are stored inline up to [`MAX_FANOUT`]; variable-size sets (a composite
//! part's atomic parts, an atomic part's incoming connections, the base assemblies using a
//! composite part) are separate objects holding a list of OIDs ([`OidList`]).

use super::params::Oo7Params;
use bytemuck::{Pod, Zeroable};
use lodestore::{Oid, Persistent};

/// Largest inline fan-out: OO7 allows 3, 6 or 9 connections per atomic part.
pub const MAX_FANOUT: usize = 9;

/// First type id of the OO7 types (the benchmark's own range).
const TYPE_BASE: u32 = 0x0007_0000;

/// The root object of an OO7 database: its parameters and its modules.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Oo7Root {
    pub seed: u64,
    pub params: Oo7Params,
    pub _pad: u32,
    /// An [`OidList`] of the modules, in order.
    pub module_list: Oid<OidList>,
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Module {
    pub id: u64,
    pub build_date: u64,
    pub kind: [u8; 16],
    pub manual: Oid<Manual>,
    /// The complex assembly at the top of the hierarchy.
    pub design_root: Oid<ComplexAssembly>,
}

/// A module's manual: this header, then `text_bytes` of text, in one (large) object.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Manual {
    pub id: u64,
    pub module: Oid<Module>,
    pub text_bytes: u64,
    pub title: [u8; 32],
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct ComplexAssembly {
    pub id: u64,
    pub build_date: u64,
    pub kind: [u8; 16],
    pub module: Oid<Module>,
    /// Null at the top of the hierarchy.
    pub super_assembly: Oid<ComplexAssembly>,
    /// 1 is the level of base assemblies, so a complex assembly's level is 2 or more; at level
    /// 2 its sub-assemblies are base assemblies, above that complex ones.
    pub level: u32,
    pub subs: u32,
    /// Raw OIDs of `ComplexAssembly` or `BaseAssembly` objects, by `level`.
    pub sub_assemblies: [u64; MAX_FANOUT],
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct BaseAssembly {
    pub id: u64,
    pub build_date: u64,
    pub kind: [u8; 16],
    pub module: Oid<Module>,
    pub super_assembly: Oid<ComplexAssembly>,
    pub components: u32,
    pub _pad: u32,
    pub composite_parts: [Oid<CompositePart>; MAX_FANOUT],
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct CompositePart {
    pub id: u64,
    pub build_date: u64,
    pub kind: [u8; 16],
    pub module: Oid<Module>,
    pub document: Oid<Document>,
    pub root_part: Oid<AtomicPart>,
    /// An [`OidList`] of its atomic parts, in creation order.
    pub parts: Oid<OidList>,
    /// An [`OidList`] of the base assemblies using it (one entry per use).
    pub used_in: Oid<OidList>,
}

/// A composite part's document: this header, then `text_bytes` of text, in one object.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Document {
    pub id: u64,
    pub composite_part: Oid<CompositePart>,
    pub text_bytes: u64,
    pub title: [u8; 32],
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct AtomicPart {
    pub id: u64,
    pub build_date: u64,
    /// The fields the update traversals increment.
    pub x: i64,
    pub y: i64,
    pub doc_id: u64,
    pub kind: [u8; 16],
    pub composite_part: Oid<CompositePart>,
    /// An [`OidList`] of the connections ending here.
    pub incoming: Oid<OidList>,
    /// Position among its composite part's atomic parts (a traversal's visited set uses it).
    pub index: u32,
    pub outgoing_count: u32,
    pub outgoing: [Oid<Connection>; MAX_FANOUT],
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Connection {
    pub kind: [u8; 16],
    pub length: u64,
    pub from: Oid<AtomicPart>,
    pub to: Oid<AtomicPart>,
}

/// A list of raw OIDs (little-endian u64s) stored as a byte object of this type.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct OidList {
    pub first: u64,
}

impl Persistent for Oo7Root {
    const TYPE_ID: u32 = TYPE_BASE + 1;
}
impl Persistent for Module {
    const TYPE_ID: u32 = TYPE_BASE + 2;
}
impl Persistent for Manual {
    const TYPE_ID: u32 = TYPE_BASE + 3;
}
impl Persistent for ComplexAssembly {
    const TYPE_ID: u32 = TYPE_BASE + 4;
}
impl Persistent for BaseAssembly {
    const TYPE_ID: u32 = TYPE_BASE + 5;
}
impl Persistent for CompositePart {
    const TYPE_ID: u32 = TYPE_BASE + 6;
}
impl Persistent for Document {
    const TYPE_ID: u32 = TYPE_BASE + 7;
}
impl Persistent for AtomicPart {
    const TYPE_ID: u32 = TYPE_BASE + 8;
}
impl Persistent for Connection {
    const TYPE_ID: u32 = TYPE_BASE + 9;
}
impl Persistent for OidList {
    const TYPE_ID: u32 = TYPE_BASE + 10;
}

/// A fixed-width text field: `text` cut or zero-padded to `N` bytes.
pub fn label<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let len = text.len().min(N);
    out[..len].copy_from_slice(&text.as_bytes()[..len]);
    out
}
