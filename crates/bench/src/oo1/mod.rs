//! The OO1 benchmark (Cattell & Skeen 1992) as Hosking, Brown & Moss section 5 run it: parts,
//! connections with locality, a part-number index, and the lookup, traversal and update
//! operations.

pub mod generate;
pub mod index;
pub mod ops;
pub mod schema;

pub use generate::{generate, LAYOUT, ROOT_NAME};
pub use ops::{lookup, traverse, OpCounts, LOOKUP_PARTS, TRAVERSAL_HOPS};
