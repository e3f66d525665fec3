//! Lodestore's benchmark suite: the OO7 and OO1 workloads, the experiments of the QuickStore
//! and Hosking/Brown/Moss papers run scheme against scheme, and their reports (terminal tables,
//! CSV, `summary.json` and plots).

pub mod ceiling;
pub mod experiments;
pub mod kv;
pub mod lists;
pub mod oo1;
pub mod oo7;
pub mod peers;
pub mod record;
pub mod report;
pub mod workspace;
