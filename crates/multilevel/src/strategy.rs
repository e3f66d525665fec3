//! The three strategies of Hasse & Weikum (section 3.1) for running multi-level
//! transactions, and their codes in the superblock.

use lodestore_core::{Error, Result};

/// How a store runs multi-level transactions: the three strategies of Hasse & Weikum
/// (section 3.1), compared by `lodestore bench` on the same operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Single level: the operations run in one flat transaction holding its page locks to its
    /// end; no semantic locks; an abort restores the pages. An operation that fails aborts
    /// the whole transaction.
    S1,
    /// Two levels, each subtransaction's commit forced to the log before its page locks go.
    S2,
    /// Two levels, subtransactions' commits not forced: page locks go as soon as the commit
    /// is in the log, and the transaction's forced commit makes its persistence sphere
    /// durable (here by the log's order: every subtransaction of the sphere committed before).
    #[default]
    S2Ps,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::S1, Strategy::S2, Strategy::S2Ps];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::S1 => "s1",
            Strategy::S2 => "s2",
            Strategy::S2Ps => "s2ps",
        }
    }

    /// The superblock's code for the strategy (0 is "none chosen").
    pub fn code(self) -> u8 {
        match self {
            Strategy::S1 => 1,
            Strategy::S2 => 2,
            Strategy::S2Ps => 3,
        }
    }

    /// The strategy of superblock code `code`; `None` for 0, none chosen (the superblock
    /// refuses unknown codes).
    pub fn from_code(code: u8) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.code() == code)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;

    fn from_str(name: &str) -> Result<Strategy> {
        Strategy::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown multi-level strategy {name:?}: s1, s2 or s2ps"
                ))
            })
    }
}
