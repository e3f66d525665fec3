//! `lodestore`: the command-line face of Lodestore.

mod demo;
mod inspect;
mod torture;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "lodestore",
    version,
    about = "Lodestore: a transactional persistent object store",
    long_about = "Lodestore keeps a graph of typed objects on disk, updated in place inside \
                  transactions. This tool creates stores, reports on them, checks their \
                  integrity, dumps their contents and runs the demo workload.\n\n\
                  A store is a folder holding the data file volume-0.data.\n\n\
                  Exit codes: 0 success; 1 `check` found problems; 2 the command failed \
                  (bad arguments, not a store, I/O error)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a new, empty store in the folder PATH.
    Init {
        /// Folder to create the store in (created if missing; must not hold a store).
        path: PathBuf,
        /// Page size in bytes: 4096, 8192, 16384, 32768 or 65536. Fixed for the store's life.
        #[arg(long, default_value_t = 8192)]
        page_size: usize,
    },
    /// Show the store's format, page size, pages by kind, objects and free space.
    Info {
        path: PathBuf,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read every page and verify checksums and structure. Exits 0 when the store is sound,
    /// 1 when problems were found (each printed with its file and page number).
    Check { path: PathBuf },
    /// Print the named roots with their OIDs, then every object: OID, type id, length and
    /// bytes in hex. An OID is printed as the unsigned 64-bit integer a stored reference holds.
    Dump {
        path: PathBuf,
        /// Print one JSON document: {"roots": {name: oid}, "objects": [{oid, type_id, length,
        /// large, bytes}]}.
        #[arg(long)]
        json: bool,
    },
    /// Run a crash campaign: seeded workloads on a simulated file system that crashes at
    /// random I/Os (dropping, keeping, tearing or reordering unsynced writes; sometimes
    /// flipping a bit or misdirecting a write), recovery after each crash, and an oracle that
    /// checks every acknowledged commit survived and nothing else did. Exits 1 on the first
    /// violation, printing the command that replays it.
    Torture {
        /// Recovery method under test.
        #[arg(long, default_value = "esm")]
        method: String,
        /// Seed of the campaign; the same seed replays the same crashes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Number of crash points.
        #[arg(long, default_value_t = 10_000)]
        crashes: u64,
        /// Crash at exactly this I/O of every workload instead of a random one.
        #[arg(long)]
        every: Option<u64>,
        /// Only crashes: no flipped bits or misdirected writes.
        #[arg(long)]
        no_media_faults: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the demo workload: create a store, build an object graph, commit, reopen, verify
    /// the graph and print `info`.
    Demo {
        /// Folder for the demo store.
        path: PathBuf,
        /// Number of part objects in the graph.
        #[arg(long, default_value_t = 100_000)]
        objects: u64,
        /// Replace a store already in PATH (only a folder that holds a Lodestore store).
        #[arg(long)]
        replace: bool,
        /// Page size in bytes.
        #[arg(long, default_value_t = 8192)]
        page_size: usize,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LODESTORE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init { path, page_size } => inspect::init(&path, page_size),
        Command::Info { path, json } => inspect::info(&path, json),
        Command::Check { path } => inspect::check(&path),
        Command::Dump { path, json } => inspect::dump(&path, json),
        Command::Demo {
            path,
            objects,
            replace,
            page_size,
        } => demo::run(&path, objects, replace, page_size),
        Command::Torture {
            method,
            seed,
            crashes,
            every,
            no_media_faults,
            json,
        } => torture::run(&method, seed, crashes, every, !no_media_faults, json),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}
