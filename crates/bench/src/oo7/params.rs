//! OO7 database parameters and the named presets.

use super::schema::MAX_FANOUT;
use bytemuck::{Pod, Zeroable};
use lodestore::{Error, Result};
use serde::Serialize;

/// Every parameter of an OO7 database. Names follow the benchmark's (NumAtomicPerComp and so on).
/// Plain old data: the database's root object stores them as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Pod, Zeroable)]
#[repr(C)]
pub struct Oo7Params {
    pub modules: u32,
    pub composite_parts_per_module: u32,
    pub atomic_parts_per_composite: u32,
    pub connections_per_atomic: u32,
    pub document_bytes: u32,
    pub manual_bytes: u32,
    /// Levels of the assembly hierarchy, base assemblies included.
    pub assembly_levels: u32,
    pub assemblies_per_assembly: u32,
    pub composite_parts_per_assembly: u32,
}

/// The presets `--preset` accepts.
pub const PRESETS: [&str; 5] = [
    "oo7-small",
    "oo7-medium",
    "qs-small",
    "qs-big",
    "thor-medium",
];

impl Oo7Params {
    /// A named preset: the standard OO7 small and medium databases (Carey, DeWitt & Naughton
    /// 1993), QuickStore's small and big databases (QuickStore Table 1), and the medium
    /// database of the Thor snapshot study (Thor Table 6.1).
    pub fn preset(name: &str) -> Result<Oo7Params> {
        let small = Oo7Params {
            modules: 1,
            composite_parts_per_module: 500,
            atomic_parts_per_composite: 20,
            connections_per_atomic: 3,
            document_bytes: 2000,
            manual_bytes: 100 * 1024,
            assembly_levels: 7,
            assemblies_per_assembly: 3,
            composite_parts_per_assembly: 3,
        };
        Ok(match name {
            "oo7-small" => small,
            "oo7-medium" => Oo7Params {
                atomic_parts_per_composite: 200,
                document_bytes: 20_000,
                manual_bytes: 1024 * 1024,
                ..small
            },
            "qs-small" => Oo7Params {
                modules: 5,
                ..small
            },
            "qs-big" => Oo7Params {
                modules: 5,
                composite_parts_per_module: 2000,
                assembly_levels: 8,
                ..small
            },
            "thor-medium" => Oo7Params {
                atomic_parts_per_composite: 200,
                manual_bytes: 1024 * 1024,
                ..small
            },
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown OO7 preset {name:?}; known presets: {}",
                    PRESETS.join(", ")
                )))
            }
        })
    }

    /// Checks the parameters fit the stored layout.
    pub fn validate(&self) -> Result<()> {
        let fanout = |name: &str, value: u32| -> Result<()> {
            if value == 0 || value as usize > MAX_FANOUT {
                return Err(Error::InvalidArgument(format!(
                    "OO7 parameter {name} is {value}; it must be 1 to {MAX_FANOUT}"
                )));
            }
            Ok(())
        };
        fanout("connections_per_atomic", self.connections_per_atomic)?;
        fanout("assemblies_per_assembly", self.assemblies_per_assembly)?;
        fanout(
            "composite_parts_per_assembly",
            self.composite_parts_per_assembly,
        )?;
        if self.modules == 0 || self.composite_parts_per_module == 0 {
            return Err(Error::InvalidArgument(
                "OO7 needs at least one module and one composite part per module".into(),
            ));
        }
        if self.atomic_parts_per_composite < 2 {
            return Err(Error::InvalidArgument(
                "OO7 needs at least two atomic parts per composite part".into(),
            ));
        }
        if !(2..=12).contains(&self.assembly_levels) {
            return Err(Error::InvalidArgument(format!(
                "OO7 parameter assembly_levels is {}; it must be 2 to 12",
                self.assembly_levels
            )));
        }
        Ok(())
    }

    /// Base assemblies in one module: the leaves of the assembly tree.
    pub fn base_assemblies_per_module(&self) -> u64 {
        (self.assemblies_per_assembly as u64).pow(self.assembly_levels - 1)
    }

    /// Complex assemblies in one module.
    pub fn complex_assemblies_per_module(&self) -> u64 {
        (0..self.assembly_levels - 1)
            .map(|level| (self.assemblies_per_assembly as u64).pow(level))
            .sum()
    }

    /// Composite-part visits of one traversal of a module (a part used by two base assemblies
    /// is visited twice).
    pub fn composite_visits_per_module(&self) -> u64 {
        self.base_assemblies_per_module() * self.composite_parts_per_assembly as u64
    }

    pub fn atomic_parts_per_module(&self) -> u64 {
        self.composite_parts_per_module as u64 * self.atomic_parts_per_composite as u64
    }
}
