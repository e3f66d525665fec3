//! The experiments of the seed papers, each a function from a configuration to run records.

pub mod complex;
pub mod difflog;
pub mod gate;
pub mod oo1;
pub mod oo7;
pub mod thor;
