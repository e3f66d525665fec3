//! Named schemes: a detector and a log generator, picked by name; what the client does. The
//! server's half, the recovery method (`esm`, `redo`, `wpl`), belongs to the store and works
//! with every scheme. A scheme is configuration; the engine has one code path per mechanism.
//!
//! | name | detector | generator | paper |
//! |---|---|---|---|
//! | `PD-ESM` | page protection (SIGSEGV) | page diff | QuickStore 3.2 |
//! | `PD-UFFD-ESM` | page protection (userfaultfd) | page diff | QuickStore 3.2 |
//! | `SD-ESM` | 64-byte sub-page blocks | sub-page diff | QuickStore 3.3 |
//! | `SL-ESM` | 64-byte sub-page blocks | sub-page log (no diff) | QuickStore 3.3 |
//! | `WPL` | none | whole page (logged whole by a `wpl` server, diffed by an `esm` one) | QuickStore 3.4 |
//! | `WPL-UFFD` | the kernel's written bits (async userfaultfd, PAGEMAP_SCAN) | whole page | QuickStore 3.4.1 |
//! | `OBJ` | object marking | object redo records | Hosking 2.2, 3 |
//! | `REMSET` | remembered set | object redo records | Hosking 2.2, 3 |
//! | `CARD-16` ... `CARD-4096` | cards | object redo records of each card | Hosking 2.2, 3 |
//! | `PAGES` | page protection | object redo records | Hosking 2.2, 3 |
//!
//! Hosking's schemes all log what their checkpoints log: (OID, byte range, new bytes) of each
//! modified region of an object, found by diffing against the original (generator
//! `ObjectRedo`). `PAGES` differs from `PD-ESM` only in that: the same detector, the same diff,
//! object redo records instead of physical before-and-after records.

use crate::detect::protection::FaultMechanism;
use crate::detect::Detector;
use lodestore_core::{Error, Result};
use lodestore_loggen::Generator;

/// QuickStore's sub-page block size in its measurements (section 4: 64 bytes).
pub const SUB_PAGE_BLOCK_BYTES: usize = 64;
/// Card sizes Hosking measured.
pub const CARD_BYTES: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scheme {
    pub detector: Detector,
    pub generator: Generator,
    /// Whether dirty pages whose changes the client logged are shipped too (ESM), or only
    /// their log records, the server redoing them on its own copy (redo-at-server, QuickStore
    /// section 3.5).
    pub ships_logged_pages: bool,
    name: &'static str,
}

impl Scheme {
    /// Does the client log whole pages (QuickStore's whole-page logging, section 3.4)?
    pub fn logs_whole_pages(&self) -> bool {
        self.generator == Generator::WholePage
    }

    const fn new(name: &'static str, detector: Detector, generator: Generator) -> Scheme {
        Scheme {
            detector,
            generator,
            ships_logged_pages: true,
            name,
        }
    }

    pub const PD_ESM: Scheme = Scheme::new(
        "PD-ESM",
        Detector::PageProtection(FaultMechanism::Signal),
        Generator::PageDiff,
    );
    /// Page diffing with redo at the server: the client ships log records only, never the
    /// pages they describe; the server applies the records to its own copy.
    pub const PD_REDO: Scheme = Scheme {
        ships_logged_pages: false,
        ..Scheme::new(
            "PD-REDO",
            Detector::PageProtection(FaultMechanism::Signal),
            Generator::PageDiff,
        )
    };
    /// Page diffing with faults delivered by userfaultfd instead of SIGSEGV.
    pub const PD_UFFD_ESM: Scheme = Scheme::new(
        "PD-UFFD-ESM",
        Detector::PageProtection(FaultMechanism::Userfaultfd),
        Generator::PageDiff,
    );
    pub const SD_ESM: Scheme = Scheme::new(
        "SD-ESM",
        Detector::SubPageBlocks {
            block_bytes: SUB_PAGE_BLOCK_BYTES,
        },
        Generator::SubPageDiff,
    );
    pub const SL_ESM: Scheme = Scheme::new(
        "SL-ESM",
        Detector::SubPageBlocks {
            block_bytes: SUB_PAGE_BLOCK_BYTES,
        },
        Generator::SubPageLog,
    );
    pub const WPL: Scheme = Scheme::new("WPL", Detector::None, Generator::WholePage);
    /// Whole-page logging with the dirty pages found by the kernel's written bits
    /// (asynchronous userfaultfd write protection and PAGEMAP_SCAN, Linux 6.7) instead of the
    /// API's write path.
    pub const WPL_UFFD: Scheme =
        Scheme::new("WPL-UFFD", Detector::WrittenPages, Generator::WholePage);
    pub const OBJ: Scheme = Scheme::new("OBJ", Detector::ObjectMarking, Generator::ObjectRedo);
    pub const REMSET: Scheme =
        Scheme::new("REMSET", Detector::RememberedSet, Generator::ObjectRedo);
    pub const PAGES: Scheme = Scheme::new(
        "PAGES",
        Detector::PageProtection(FaultMechanism::Signal),
        Generator::ObjectRedo,
    );

    const CARDS: [Scheme; 9] = [
        Scheme::card("CARD-16", 16),
        Scheme::card("CARD-32", 32),
        Scheme::card("CARD-64", 64),
        Scheme::card("CARD-128", 128),
        Scheme::card("CARD-256", 256),
        Scheme::card("CARD-512", 512),
        Scheme::card("CARD-1024", 1024),
        Scheme::card("CARD-2048", 2048),
        Scheme::card("CARD-4096", 4096),
    ];

    const fn card(name: &'static str, card_bytes: usize) -> Scheme {
        Scheme::new(name, Detector::Cards { card_bytes }, Generator::ObjectRedo)
    }

    /// Every named scheme.
    pub fn all() -> Vec<Scheme> {
        let mut all = vec![
            Scheme::PD_ESM,
            Scheme::PD_REDO,
            Scheme::PD_UFFD_ESM,
            Scheme::SD_ESM,
            Scheme::SL_ESM,
            Scheme::WPL,
            Scheme::WPL_UFFD,
            Scheme::OBJ,
            Scheme::REMSET,
            Scheme::PAGES,
        ];
        all.extend(Scheme::CARDS);
        all
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Does the scheme need page protection (a SIGSEGV handler and a protected arena)?
    pub fn uses_page_protection(&self) -> bool {
        self.fault_mechanism().is_some()
    }

    /// How page protection's write faults are delivered, if the scheme uses it.
    pub fn fault_mechanism(&self) -> Option<FaultMechanism> {
        match self.detector {
            Detector::PageProtection(faults) => Some(faults),
            _ => None,
        }
    }
}

impl Default for Scheme {
    /// Sub-page diffing: software detection needs no signal handler in the host program, and
    /// QuickStore found it never much worse than page diffing and better when the recovery
    /// buffer is small.
    fn default() -> Self {
        Scheme::SD_ESM
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl std::str::FromStr for Scheme {
    type Err = Error;

    fn from_str(name: &str) -> Result<Scheme> {
        Scheme::all()
            .into_iter()
            .find(|s| s.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown scheme {name:?}; known: {}",
                    Scheme::all()
                        .iter()
                        .map(|s| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_parses_from_its_name_and_unknown_names_are_refused() {
        for scheme in Scheme::all() {
            assert_eq!(scheme.name().parse::<Scheme>().unwrap(), scheme);
        }
        let error = "PD-XYZ".parse::<Scheme>().unwrap_err().to_string();
        assert!(
            error.contains("PD-XYZ") && error.contains("CARD-4096"),
            "{error}"
        );
    }
}
