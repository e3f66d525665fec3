//! Multi-level transactions (Hasse & Weikum, "A Performance Evaluation of Multi-Level
//! Transaction Management", VLDB 1991; the DASDBS kernel): the family's own mechanisms, apart
//! from the engine that runs them.
//!
//! - [`records`]: the level-1 (L1) undo records of high-level operations and their
//!   compensations, and the level-0 (L0) page after-image records written atomically per
//!   subtransaction or per persistence sphere, with the paper's EOS and EOT flags (section 2).
//! - [`sphere`]: persistence spheres, the set of pages a committing transaction must write to
//!   the L0 log when page writes are deferred to the end of the transaction (section 2,
//!   "Deferred Log Writes").
//! - [`strategy`]: S1, S2 and S2/PS, the strategies the paper compares (section 3.1).
//! - [`warm_start`]: which completed subtransactions of which loser transactions the warm
//!   start compensates, newest first, from what the log says (section 2, the undo pass).
//!
//! Record kinds are in `lodestore_wal::kinds::MULTI_LEVEL` ([`kinds`]).

pub mod kinds;
pub mod records;
pub mod sphere;
pub mod strategy;
pub mod warm_start;
