//! The OO7 benchmark (Carey, DeWitt & Naughton 1993) as QuickStore section 4 and Thor section
//! 6.2 run it: the schema, the seeded generator, the presets and the traversals.

pub mod generate;
pub mod params;
pub mod schema;
pub mod traverse;

pub use generate::{generate, Oo7Plan, LAYOUT, ROOT_NAME};
pub use params::{Oo7Params, PRESETS};
pub use traverse::{traverse, Traversal, TraversalCounts, TRAVERSALS};

use lodestore::{Oid, Result};
use schema::{Module, Oo7Root};

/// The modules of the database in `txn`'s store, in order.
pub fn modules(txn: &mut impl lodestore::ReadTransaction) -> Result<Vec<Oid<Module>>> {
    let root: Oid<Oo7Root> = txn.root_typed(ROOT_NAME)?;
    let list = txn.get(root)?.module_list;
    let mut raw = Vec::new();
    crate::lists::read_oid_list(txn, list, &mut raw)?;
    Ok(raw.into_iter().map(crate::lists::typed).collect())
}
