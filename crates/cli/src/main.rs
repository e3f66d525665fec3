//! `lodestore`: the command-line face of Lodestore.

mod args;
mod bench;
mod bench_bank;
mod bench_complex;
mod bench_detect;
mod bench_diff;
mod bench_difflog;
mod bench_kv;
mod bench_net;
mod bench_peers;
mod bench_readers;
mod bench_suite;
mod campaign;
mod demo;
mod inspect;
mod security;
mod serve;
mod snapshots;
mod stress;
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
                  integrity, dumps their contents (none of which writes to a store), recovers \
                  them, salvages what can be read from a damaged one, serves them to remote clients, runs crash \
                  campaigns and runs the benchmark suite (`lodestore bench`).\n\n\
                  A store is a folder holding the data file volume-0.data.\n\n\
                  Exit codes: 0 success; 1 `check` found problems; 2 the command failed \
                  (bad arguments, not a store, I/O error); 3 `check` found a store that was \
                  not closed cleanly and is sound once recovered (`recover` writes that)."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Create a new, empty store in the folder PATH.
    Init {
        /// Folder to create the store in (missing or empty; the store appears there whole once
        /// it is complete).
        path: PathBuf,
        /// Page size in bytes: 4096, 8192, 16384, 32768 or 65536. Fixed for the store's life.
        #[arg(long, default_value_t = 8192, value_parser = args::page_size)]
        page_size: usize,
        /// LSN span of one log segment file in bytes: a multiple of 4096 from 256 KiB to 1 GiB
        /// (default 1 MiB). Fixed for the store's life.
        #[arg(long, default_value_t = 1 << 20)]
        log_segment_bytes: u64,
        /// Keep snapshots (see `snapshot`); a store that keeps them always does.
        #[arg(long)]
        snapshots: bool,
        /// Recovery method: esm (ARIES-style records, the default), redo (clients ship log
        /// records only), wpl (whole-page logging), dbcache (the database-cache method of
        /// Hasse & Weikum: page changes wait in the pool and reach the log as atomic writes of
        /// after-images, per subtransaction or persistence sphere), or a main-memory method of
        /// differential logging that keeps every page in the server pool: dl1p, dl2p (XOR
        /// records, one-pass or two-pass restart) or pl2p (its physical-logging baseline). Or
        /// a multi-level strategy, s1, s2 or s2ps: dbcache with that strategy recorded, as
        /// --strategy does.
        #[arg(long, default_value = "esm")]
        method: String,
        /// Multi-level strategy the store's sessions use unless they choose: s1 (one flat
        /// transaction of operations), s2 (each subtransaction's end forced) or s2ps (only
        /// the transaction's end forced; the default). `info` shows it.
        #[arg(long)]
        strategy: Option<lodestore::multilevel::Strategy>,
        /// Log streams of a dl1p, dl2p or pl2p store (1 to 64): each transaction logs to the
        /// idlest, each stream with its own files and group commit. Fixed for the store's life.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
        log_streams: u8,
    },
    /// Show the store's format, page size, recovery method, pages by kind, objects and free
    /// space, its snapshots and the size of their archive, and the counters of the sessions of earlier runs per scheme (traps, pieces
    /// copied, bytes compared, log records and bytes, pages shipped, time by Hosking's
    /// phases). Never writes to the store: one not closed cleanly is shown as recovery would
    /// leave it, recovered in memory only.
    Info {
        path: PathBuf,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read every page of the data file as it lies on disk and verify checksums and
    /// structure, then do the same to the store as recovery would leave it (recovered in
    /// memory only). Never writes to the store. Damage that recovery would rewrite is still
    /// reported: as a repair in a store left by a crash, as a problem in one closed cleanly.
    /// Exits 0 when the store is sound, 1 when problems were found (each printed with its
    /// file and page number), 3 when it was not closed cleanly and is sound once recovered
    /// (each repair recovery would make is listed).
    Check {
        path: PathBuf,
        /// Check the data file as it lies on disk, without recovering first.
        #[arg(long)]
        no_recover: bool,
    },
    /// Print the named roots with their OIDs, then every object: OID, type id, length and
    /// bytes in hex. An OID is printed as the unsigned 64-bit integer a stored reference holds.
    /// Never writes to the store (one not closed cleanly is recovered in memory only). A
    /// damaged page is named on standard error and skipped; the exit code is then 1.
    Dump {
        path: PathBuf,
        /// Print one JSON document: {"roots": {name: oid}, "objects": [{oid, type_id, length,
        /// large, bytes}]}.
        #[arg(long)]
        json: bool,
        /// Dump the store as it was at this snapshot (its id; see `snapshots`), in the same
        /// format, so that two dumps compare with `diff`.
        #[arg(long, conflicts_with = "as_of")]
        snapshot: Option<u64>,
        /// Dump the store as of this time: the newest snapshot taken at or before it. RFC 3339
        /// (2026-11-25T01:02:03Z) or microseconds since the Unix epoch.
        #[arg(long, value_parser = snapshots::parse_time)]
        as_of: Option<std::time::SystemTime>,
        #[command(flatten)]
        archive: security::ArchiveArgs,
    },
    /// Take a snapshot of the store in PATH (or of the server at --connect): it holds exactly
    /// the transactions committed before it, survives any crash, and can be read later with
    /// `dump --snapshot` or `Session::begin_as_of`. The store must keep snapshots (created or
    /// opened once with them on: `init --snapshots`). With --delete or --delete-before,
    /// deletes snapshots instead, and the page copies no remaining snapshot reads.
    Snapshot {
        /// Folder of the store; omit with --connect.
        #[arg(required_unless_present = "connect")]
        path: Option<PathBuf>,
        /// The server at this address (see `serve`) instead of a folder.
        #[arg(long, conflicts_with = "path")]
        connect: Option<String>,
        /// Delete the snapshot with this id (repeat for several).
        #[arg(long)]
        delete: Vec<u64>,
        /// Delete every snapshot taken before this time (RFC 3339 or microseconds since the
        /// Unix epoch).
        #[arg(long, value_parser = snapshots::parse_time)]
        delete_before: Option<std::time::SystemTime>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        security: security::ClientSecurityArgs,
        #[command(flatten)]
        archive: security::ArchiveArgs,
    },
    /// List the snapshots of the store in PATH (or of the server at --connect): id, time and
    /// place in the log, and for a local store the size of its archive and snapshot log.
    /// Never writes to a local store.
    Snapshots {
        /// Folder of the store; omit with --connect.
        #[arg(required_unless_present = "connect")]
        path: Option<PathBuf>,
        /// The server at this address (see `serve`) instead of a folder.
        #[arg(long, conflicts_with = "path")]
        connect: Option<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        security: security::ClientSecurityArgs,
        #[command(flatten)]
        archive: security::ArchiveArgs,
    },
    /// Recover the store in PATH if it was not closed cleanly (redo committed changes, roll
    /// back unfinished transactions, drop a torn log tail) and close it, writing the result:
    /// the one inspection command that writes. Prints what recovery did and how long it took.
    Recover {
        path: PathBuf,
        /// Restart level of a dl1p, dl2p or pl2p store (1 to 4, Lee, Kim & Cha's Table 1): 1
        /// loads the backup, then reads the streams, then replays them; 2 replays each stream
        /// as it is read; 3 reads the backup and the streams at once; 4 also replays while the
        /// backup goes in. Other methods ignore it
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=4))]
        restart_level: u8,
    },
    /// Copy every object that can still be read from a damaged store at SOURCE into a new
    /// store at OUT (missing or an empty folder), page by page at the same page numbers so every
    /// object keeps its OID. SOURCE is only read. Its log is used when it can be; when it is
    /// damaged or missing, the data file is read as it lies (changes since its last checkpoint
    /// are then lost). Damaged pages, large objects that lost a page, and pages whose owner
    /// was lost are left out and listed. SQLite's `.recover` is the model.
    Salvage {
        source: PathBuf,
        out: PathBuf,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run a crash campaign: seeded workloads on a simulated file system that crashes at
    /// random I/Os (dropping, keeping, tearing or reordering unsynced writes; sometimes
    /// flipping a bit or misdirecting a write), recovery after each crash, and an oracle that
    /// checks every acknowledged commit survived and nothing else did. Exits 1 on the first
    /// violation, printing the command that replays it.
    Torture(torture::TortureArgs),
    /// The long crash campaign: every recovery method with every scheme, the crash points
    /// spread evenly over them and cut into chunks, each a `torture` process with a seed of its
    /// own, several at a time. Prints tables by method and scheme and by fault kind and
    /// outcome, writes each chunk's report and summary.json to --out, and prints the one-line
    /// reproduction of every failure. Exits 1 if any chunk failed.
    Campaign(campaign::CampaignArgs),
    /// Run bank transfers between accounts from several threads, appending one line per
    /// transfer to the acks file only after its commit returned: the commit LSN and the two
    /// account indexes. The root `bank` holds the account OIDs (u64 little-endian, in order);
    /// each account is 16 bytes: i64 balance (starting at 1000), u64 transfer count. Running
    /// again on the same store continues with its accounts. Made for kill -9 tests.
    Stress {
        /// Folder of the store (created if missing); omit with --connect.
        #[arg(required_unless_present = "connect")]
        path: Option<PathBuf>,
        /// Run against the server at this address (see `serve`) instead of a folder.
        #[arg(long, conflicts_with = "path")]
        connect: Option<String>,
        /// Accounts in the bank (2 to 10,000,000).
        #[arg(long, default_value_t = 100, value_parser = args::accounts)]
        accounts: u64,
        /// Threads, each a session of its own (1 to 256).
        #[arg(long, default_value_t = 4, value_parser = args::threads)]
        threads: u32,
        /// How long to run, in seconds (at most a week; 0 only sets up the bank).
        #[arg(long, default_value_t = 10.0, value_parser = args::seconds_or_zero)]
        seconds: f64,
        /// File the acknowledged transfers are appended to.
        #[arg(long)]
        acks: PathBuf,
        /// Run each transfer as a multi-level transaction: one operation of commuting
        /// increments (both accounts' balances and counts) in a subtransaction, under
        /// increment locks on the two accounts held to the end, so transfers touching one
        /// account run at once (Hasse & Weikum). Without it, a transfer is one flat
        /// transaction holding its page locks to its end.
        #[arg(long)]
        semantic: bool,
        /// With --semantic: s2ps (subtransaction ends not forced), s2 (each forced) or s1 (one
        /// flat transaction running the same operations). Default: the store's (see `init
        /// --strategy`; s2ps unless chosen).
        #[arg(long, requires = "semantic", value_parser = args::strategy)]
        strategy: Option<lodestore::multilevel::Strategy>,
        /// Take a checkpoint after this many log records (default 15,000; see
        /// `Options::checkpoint_log_records`), or after 16 MiB of log, whichever comes first.
        /// A larger number leaves more log for the restart after a kill. Store folders only.
        #[arg(long, conflicts_with = "connect")]
        checkpoint_records: Option<u64>,
        #[command(flatten)]
        security: security::ClientSecurityArgs,
    },
    /// Make a set of certificates for serving TLS in the folder DIR: a certificate authority
    /// whose clients may write, one whose clients may only read, a server certificate for the
    /// names given and for loopback, and a client certificate from each authority. Keys are
    /// readable by their owner only; no file is ever overwritten. Prints the `serve` and
    /// client flags that use them.
    Certs {
        /// Folder to write the certificates to (created if missing).
        dir: PathBuf,
        /// A name (host or IP address) clients reach the server by; repeat for several.
        /// localhost, 127.0.0.1 and ::1 are always included.
        #[arg(long = "name")]
        names: Vec<String>,
    },
    /// Serve the store in PATH to remote clients (`Store::connect`, `stress --connect`) on
    /// ADDR until interrupted. Each connection is one client session; a client that breaks the
    /// protocol is disconnected with the reason logged, and the transactions of a closed
    /// connection roll back. Set LODESTORE_LOG=info to see connections come and go.
    Serve(serve::ServeArgs),
    /// Run a snapshot archive node on --listen until interrupted: it keeps the page copies stores
    /// archive there (`Options::snapshot_archive` with `ArchiveNodes`, several nodes and a
    /// replication factor) in one checksummed file in DIR, with the same tokens, TLS and
    /// limits as `serve`.
    ArchiveServe(serve::ArchiveServeArgs),
    /// Run a peer of a snapshot archive DHT (libp2p Kademlia) until killed: it keeps the page
    /// records stores archive there (`--archive p2p://ID@HOST:PORT,.../NAMESPACE?replicas=N`)
    /// in DIR, with its key, and writes ID@HOST:PORT to DIR/peer.addr and standard output
    /// once it listens. Join other peers with --peer ID@HOST:PORT; peers find one another
    /// from there.
    #[cfg(feature = "p2p")]
    ArchivePeer(lodestore_archive_p2p::PeerArgs),
    /// The benchmark suite. Alone, `lodestore bench` runs the QuickStore experiments (OO7
    /// T1, T2A, T2B, T2C on the oo7-small database, recovery buffers of 4 MiB and 0.5 MiB) and
    /// the Hosking experiments (OO1 lookup, traversal, update at p = 0 to 1, long-running
    /// transactions) for every scheme, in a few minutes, printing tables and writing
    /// runs.csv, summary.json and plots to --out. The subcommands run one experiment with
    /// every knob, or one of the micro-benchmarks.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        which: Option<BenchCommand>,
        #[command(flatten)]
        suite: bench_suite::SuiteArgs,
    },
    /// Run the demo workload: create a store, build an object graph, commit, reopen, verify
    /// the graph and print `info`.
    Demo {
        /// Folder for the demo store.
        path: PathBuf,
        /// Number of part objects in the graph (1 to 50,000,000).
        #[arg(long, default_value_t = 100_000, value_parser = args::demo_objects)]
        objects: u64,
        /// Replace a store already in PATH (only a folder that holds a Lodestore store).
        #[arg(long)]
        replace: bool,
        /// Page size in bytes: 4096, 8192, 16384, 32768 or 65536.
        #[arg(long, default_value_t = 8192, value_parser = args::page_size)]
        page_size: usize,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// OO7 traversals (QuickStore section 4, Thor section 6.2): each traversal one transaction,
    /// repeated with the client cache kept, per scheme, recovery buffer size and client count.
    /// Prints a table per configuration; writes runs.csv, summary.json and plots (response
    /// time, throughput against clients, pages and log pages shipped per transaction).
    Oo7(bench_suite::Oo7Args),
    /// OO1 (Hosking, Brown & Moss section 5): lookup and traversal series, update series at
    /// each update probability (cold, warm and hot iterations), and long-running transactions
    /// of k hot traversals per commit with a fit y = a + b k per scheme. Prints tables; writes
    /// runs.csv, summary.json and plots (time vs update probability, phase breakdowns, fits).
    Oo1(bench_suite::Oo1Args),
    /// Thor's snapshot experiments (Moh chapter 6) on OO7: T1, T2A, T2B, T2C and the modified
    /// T2B (10% of atomic parts) with snapshots off, on with none taken, and a snapshot before
    /// each transaction, interleaved; then T1 cold on the current store against T1 as of a
    /// snapshot, with a delay added to every archive read and the fit a + reads x delay
    /// (Table 6.2). Prints tables; writes thor.csv, thor.json and plots.
    Thor(bench_suite::ThorArgs),
    /// Print the tables and redraw the plots of an earlier run from the summary.json in DIR.
    Report(bench_suite::ReportArgs),
    /// Lodestore against LMDB, redb and SQLite on the OO7 database, in the same run: load,
    /// the traversals, durable commits at several thread counts and size on disk, each peer
    /// holding the objects as key-value pairs and making every commit durable, next to the
    /// fdatasync ceiling. Tables of medians and Lodestore's lead; peers.csv and a plot in --out.
    Peers(bench_peers::PeersArgs),
    /// The child process of `bench peers`' kill -9 workload: commits on the store until
    /// killed, printing each acknowledged sequence number.
    #[command(hide = true)]
    PeersCrashChild(bench_peers::CrashChildArgs),
    /// Commits per second and commit latency for each thread count, next to this machine's
    /// fdatasync latency and batched-sync bandwidth measured in the same run in PATH.
    Commit {
        /// Folder for the benchmark stores and the probe file.
        path: PathBuf,
        /// Thread counts, comma separated (each 1 to 256).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16", value_parser = args::thread_count)]
        threads: Vec<usize>,
        /// Adaptive commit delays to measure, in microseconds, comma separated (0: off, the
        /// default; at most 100000): a commit that would start a log sync first waits this
        /// long while at least 5 other transactions are active (`Options::commit_delay`).
        #[arg(long, value_delimiter = ',', default_value = "0", value_parser = args::commit_delay_us)]
        commit_delay_us: Vec<u64>,
        /// Other active transactions a commit needs before it delays
        /// (`Options::commit_siblings`; 0: always).
        #[arg(long, default_value_t = 5, value_parser = args::thread_count_or_zero)]
        commit_siblings: usize,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0, value_parser = args::seconds)]
        seconds: f64,
        /// Runs; the table shows medians.
        #[arg(long, default_value_t = 3, value_parser = args::runs)]
        runs: usize,
        /// Also write every run as CSV here.
        #[arg(long)]
        csv: Option<PathBuf>,
    },
    /// What update detection costs per scheme: nanoseconds per update of a hot loop rewriting
    /// objects already written (as a ratio to the same loop with detection off) and per first
    /// write of a page (as a ratio to a bare write fault with a page copy, measured in the same
    /// run), then the commit's time by Hosking's phases (running, old, new, write, other).
    Detect {
        /// Folder for the benchmark store.
        path: PathBuf,
        /// Runs; the table shows medians.
        #[arg(long, default_value_t = 5, value_parser = args::runs)]
        runs: usize,
    },
    /// What a request to a Lodestore server costs over loopback TCP (a lock the transaction
    /// holds already, a page fetch, a new connection with its handshake), plain and over TLS,
    /// next to a bare TCP ping-pong with replies of the same size (or a bare connect) and to
    /// the same requests made in process, all measured in the same run, with client and
    /// server threads pinned to one CPU, pinned to two, and unpinned.
    Net {
        /// Folder for the benchmark store.
        path: PathBuf,
        /// Runs; the table shows medians.
        #[arg(long, default_value_t = 5, value_parser = args::runs)]
        runs: usize,
        /// Requests per timed burst.
        #[arg(long, default_value_t = 2000, value_parser = args::requests)]
        requests: usize,
    },
    /// Ordered keys against redb and LMDB (heed), each with default settings and durable
    /// commits, in the same run: inserts in sorted and in random order (transactions of
    /// 10,000), point lookups and range scans of 1,000 keys, on u64 keys with u64 values in a
    /// Lodestore `BTreeMap`, a redb table and an LMDB database. Every store's reads must add up
    /// to the same checksum. The stores take turns within each run, each run starting with the
    /// next one. Prints operations per second (medians of the runs), Lodestore's ratio to each
    /// peer (the median of the ratios within each run) and the bytes each store took on disk.
    Kv {
        /// Folder for the benchmark stores (emptied and removed as it goes).
        path: PathBuf,
        /// Keys in each store.
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1_000..=100_000_000))]
        keys: u64,
        /// Runs; the table shows medians.
        #[arg(long, default_value_t = 3, value_parser = args::runs)]
        runs: usize,
        /// Also write every run's figures to this CSV file.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Also draw each store's throughput relative to Lodestore's, per workload, to
        /// STEM.svg and STEM.png.
        #[arg(long, value_name = "STEM")]
        plot: Option<PathBuf>,
        /// Run Lodestore alone, without the peers (for profiling it).
        #[arg(long)]
        lodestore_only: bool,
    },
    /// Differential logging against physical logging (Lee, Kim & Cha, section 5): a table of
    /// fixed-size records, transactions inserting two or deleting two (2% aborted), under
    /// dl1p, dl2p and pl2p with the same log streams and threads, the methods taking turns
    /// within each run. Prints the bytes logged, transactions per second and restarts of
    /// everything logged since the load (copies of the open store's files, as kill -9 leaves
    /// them, out of the page cache) at levels 1, 2 and 4 of the paper's Table 1, split into
    /// backup load, log read and replay, against the disk's raw read of the same streams; with
    /// each method's ratio to pl2p (medians of the runs). The streams can lie on emulated
    /// disks of a given bandwidth, and one setting can be swept, with plots like the paper's
    /// figures.
    Difflog(bench_difflog::DifflogArgs),
    /// Hasse & Weikum's complex-object benchmark (section 3): complex objects of subobjects
    /// clustered on their own pages, transactions of c operations each visiting own (o) and
    /// foreign (f) subobjects and updating some, under S1 (page locks to the end), S2 and
    /// S2/PS (subtransactions, semantic locks on subobjects) at each degree of
    /// multiprogramming, with a buffer pool smaller than the database and data-file reads of
    /// an emulated latency. Prints throughput, response time, conflict rate, lock wait,
    /// level-0 log writes, pages per write and persistence sphere sizes, with S2/PS against S1
    /// at its peak; CSV and the paper's figures 7 and 9 on request.
    Complex(bench_complex::ComplexArgs),
    /// Bank transfers (`stress`'s) on one store as flat transactions holding page locks to
    /// their end, and as multi-level transactions under each strategy of Hasse & Weikum: S1
    /// (one flat transaction of operations), S2 (subtransactions, each end forced), S2/PS
    /// (ends not forced); modes in turn, rotating. Prints commits/s and the ratio to flat,
    /// lock waits, log flushes and log bytes per commit, subtransactions, persistence sphere
    /// sizes, and a group-commit round's time with its leader's gathering and its write and
    /// sync.
    Bank(bench_bank::BankArgs),
    /// What a long reader costs writers: two writer threads moving units between 20,000
    /// accounts of a collection (durable commits) alone, next to a reader scanning every
    /// account again and again inside one `Store::read_latest` (no locks), and next to the
    /// same reader in an ordinary transaction (shared locks held to its end). Prints writers'
    /// commits per second as a ratio to alone, and the reader's scans (medians of the runs).
    Readers {
        /// Folder for the benchmark store.
        path: PathBuf,
        /// Seconds per mode and run.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Runs; the table shows medians.
        #[arg(long, default_value_t = 3, value_parser = args::runs)]
        runs: usize,
    },
    /// Page-diffing throughput (GB/s on one core) for a large object's data page and for a
    /// page of small objects, unchanged and changed as updates change them, and for the 64-byte
    /// blocks sub-page diffing compares, next to a plain comparison of the same bytes measured
    /// in the same run (short samples in turn; medians). The scan column is the first pass
    /// alone; for blocks, the least any block diff does (AVX-512 CPUs only).
    Diff {
        #[arg(long, default_value_t = 8192)]
        page_size: usize,
        /// Seconds per figure.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Also write every sample to this CSV file.
        #[arg(long)]
        csv: Option<PathBuf>,
    },
}

/// Commands whose output is read through a pipe (`info | head -1`) end quietly when the reader
/// goes away, as other Unix tools do, instead of failing on the write. Not for the commands
/// that may talk over sockets (serve, stress, bench but its report), which must see a closed
/// peer as an error.
fn quiet_on_closed_pipe() {
    // SAFETY: restores the default action of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A crash campaign makes the store fail on purpose thousands of times; its warnings about
    // those failures would bury the campaign's own report.
    let default_filter = if matches!(cli.command, Command::Torture(_)) {
        "error"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LODESTORE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_writer(std::io::stderr)
        .init();
    let talks_over_sockets = matches!(
        cli.command,
        Command::Serve(_)
            | Command::ArchiveServe(_)
            | Command::Stress { .. }
            | Command::Bench { .. }
    );
    if !talks_over_sockets
        || matches!(
            cli.command,
            Command::Bench {
                which: Some(BenchCommand::Report(_)),
                ..
            }
        )
    {
        quiet_on_closed_pipe();
    }
    let result = match cli.command {
        Command::Init {
            path,
            page_size,
            log_segment_bytes,
            snapshots,
            method,
            strategy,
            log_streams,
        } => inspect::init_method(&method, strategy).and_then(|(method, strategy)| {
            inspect::init(
                &path,
                page_size,
                log_segment_bytes,
                snapshots,
                method,
                strategy,
                usize::from(log_streams),
            )
        }),
        Command::Info { path, json } => inspect::info(&path, json),
        Command::Check { path, no_recover } => inspect::check(&path, !no_recover),
        Command::Recover {
            path,
            restart_level,
        } => inspect::recover(
            &path,
            lodestore::RestartLevel::from_number(restart_level).expect("clap checks the range"),
        ),
        Command::Salvage { source, out, json } => inspect::salvage(&source, &out, json),
        Command::Dump {
            path,
            json,
            snapshot,
            as_of,
            archive,
        } => match (snapshot, as_of) {
            (Some(id), _) => snapshots::dump(&path, &archive, lodestore::AsOf::Snapshot(id), json),
            (None, Some(time)) => {
                snapshots::dump(&path, &archive, lodestore::AsOf::Time(time), json)
            }
            (None, None) => inspect::dump(&path, json),
        },
        Command::Snapshot {
            path,
            connect,
            delete,
            delete_before,
            json,
            security,
            archive,
        } => snapshots::snapshot(
            &snapshots::Target {
                path: path.as_deref(),
                connect: connect.as_deref(),
                security: &security,
                archive: &archive,
            },
            &delete,
            delete_before,
            json,
        ),
        Command::Snapshots {
            path,
            connect,
            json,
            security,
            archive,
        } => snapshots::list(
            &snapshots::Target {
                archive: &archive,
                path: path.as_deref(),
                connect: connect.as_deref(),
                security: &security,
            },
            json,
        ),
        Command::Demo {
            path,
            objects,
            replace,
            page_size,
        } => demo::run(&path, objects, replace, page_size),
        Command::Stress {
            path,
            connect,
            accounts,
            threads,
            seconds,
            acks,
            semantic,
            strategy,
            checkpoint_records,
            security,
        } => stress::run(
            path.as_deref(),
            connect.as_deref(),
            &security,
            stress::Workload {
                accounts,
                threads,
                seconds,
                acks: &acks,
                semantic,
                strategy,
                checkpoint_records,
            },
        ),
        Command::Serve(args) => serve::run(&args),
        Command::ArchiveServe(args) => serve::run_archive(&args),
        #[cfg(feature = "p2p")]
        Command::ArchivePeer(args) => {
            lodestore_archive_p2p::peer::run(&args).map(|()| ExitCode::SUCCESS)
        }
        Command::Certs { dir, names } => security::certs(&dir, &names),
        Command::Bench { which, suite } => match which {
            None => bench_suite::suite(&suite),
            Some(BenchCommand::Oo7(args)) => bench_suite::oo7(&args),
            Some(BenchCommand::Oo1(args)) => bench_suite::oo1(&args),
            Some(BenchCommand::Thor(args)) => bench_suite::thor(&args),
            Some(BenchCommand::Report(args)) => bench_suite::report_again(&args),
            Some(BenchCommand::Peers(args)) => bench_peers::peers(&args),
            Some(BenchCommand::PeersCrashChild(args)) => bench_peers::crash_child(&args),
            Some(BenchCommand::Commit {
                path,
                threads,
                commit_delay_us,
                commit_siblings,
                seconds,
                runs,
                csv,
            }) => bench::commit(
                &path,
                &threads,
                &commit_delay_us,
                commit_siblings,
                seconds,
                runs,
                csv.as_deref(),
            ),
            Some(BenchCommand::Diff {
                page_size,
                seconds,
                csv,
            }) => bench_diff::diff(page_size, seconds, csv.as_deref()),
            Some(BenchCommand::Detect { path, runs }) => bench_detect::detect(&path, runs),
            Some(BenchCommand::Readers {
                path,
                seconds,
                runs,
            }) => bench_readers::readers(&path, seconds, runs),
            Some(BenchCommand::Bank(args)) => bench_bank::bank(&args),
            Some(BenchCommand::Kv {
                path,
                keys,
                runs,
                csv,
                plot,
                lodestore_only,
            }) => bench_kv::kv(
                &path,
                keys,
                runs,
                bench_kv::Outputs {
                    csv: csv.as_deref(),
                    plot: plot.as_deref(),
                },
                lodestore_only,
            ),
            Some(BenchCommand::Net {
                path,
                runs,
                requests,
            }) => bench_net::net(&path, runs, requests),
            Some(BenchCommand::Difflog(args)) => bench_difflog::difflog(&args),
            Some(BenchCommand::Complex(args)) => bench_complex::complex(&args),
        },
        Command::Torture(args) => torture::run(&args),
        Command::Campaign(args) => campaign::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}
