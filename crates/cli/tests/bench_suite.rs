//! `lodestore bench` end to end at smoke size: tables on stdout, runs.csv, summary.json with the
//! documented fields, and plots; bad arguments are refused with a message naming them.

use std::process::{Command, Output};

fn lodestore() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lodestore"))
}

/// The standard output of a command that must have succeeded (both outputs shown if not).
fn succeeded(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

const OO7_FIELDS: [&str; 16] = [
    "experiment",
    "preset",
    "scheme",
    "traversal",
    "clients",
    "run",
    "elapsed_ms",
    "atomic_parts_visited",
    "updates",
    "distinct_objects_modified",
    "distinct_composite_parts_visited",
    "log_records",
    "log_bytes",
    "pages_shipped",
    "log_pages_shipped",
    "server_log_pages_written",
];

#[test]
fn smoke_suite_writes_tables_csv_summary_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let output = lodestore()
        .args([
            "bench",
            "--smoke",
            "--schemes",
            "PD-ESM,WPL,REMSET",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = succeeded(&output);
    assert!(stdout.contains("OO7 t2a on oo7-small"), "{stdout}");
    assert!(stdout.contains("OO1 update"), "{stdout}");

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let runs = summary["runs"].as_array().unwrap();
    let oo7: Vec<_> = runs.iter().filter(|r| r["experiment"] == "oo7").collect();
    // 3 schemes x 2 recovery buffers x 2 traversals x 1 run.
    assert_eq!(oo7.len(), 12);
    for run in &oo7 {
        for field in OO7_FIELDS {
            assert!(!run[field].is_null(), "{field} missing in {run}");
        }
        assert!(run["elapsed_ms"].as_f64().unwrap() > 0.0);
        // oo7-small: 729 base assemblies x 3 composite parts x 20 atomic parts.
        assert_eq!(run["atomic_parts_visited"], 43_740);
        let updates = run["updates"].as_u64().unwrap();
        match run["traversal"].as_str().unwrap() {
            "t2a" => assert_eq!(updates, 2187),
            "t2b" => assert_eq!(updates, 43_740),
            other => panic!("unexpected traversal {other}"),
        }
        assert!(run["pages_shipped"].as_u64().unwrap() > 0);
        if run["scheme"] != "WPL" {
            assert!(run["log_records"].as_u64().unwrap() > 0, "{run}");
        }
    }
    let updates: Vec<_> = runs
        .iter()
        .filter(|r| r["experiment"] == "oo1-update")
        .collect();
    // 3 schemes x 3 probabilities x (10 cold-warm + 10 hot).
    assert_eq!(updates.len(), 180);
    for run in &updates {
        assert_eq!(run["parts_visited"], 3280);
        if run["update_probability"] == 0.0 {
            assert_eq!(run["updates"], 0);
        }
        if run["update_probability"] == 1.0 {
            assert_eq!(run["updates"], 3280);
        }
    }
    let csv = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    assert_eq!(csv.lines().count(), runs.len() + 1);

    // The peers: every store in the table, and per store load, 4 traversals, 3 thread counts,
    // size on disk, reopen after kill -9 (no acknowledged commit lost), and OO1 load, lookup,
    // traversal and update in peers.csv.
    assert!(stdout.contains("lead over sqlite"), "{stdout}");
    let peers = std::fs::read_to_string(out.join("peers/peers.csv")).unwrap();
    for store in ["lodestore", "lmdb", "redb", "sqlite"] {
        let rows = peers
            .lines()
            .filter(|l| l.starts_with(&format!("{store},")))
            .count();
        assert_eq!(rows, 14, "{store}: {peers}");
        for workload in ["reopen after kill -9,ms", "oo1 update,ms"] {
            assert!(peers.contains(&format!("{store},0,{workload},")), "{peers}");
        }
    }
    assert!(peers.contains(",commits x16,commits/s,"), "{peers}");

    // Thor's T1 as of a snapshot, from the local archive, from an archive node on loopback
    // and from S3 on s3s-fs (required where the test servers are: scripts/test.sh), one copy
    // a read and 32: the same copies (bytes) in fewer round trips.
    let thor = std::fs::read_to_string(out.join("thor.csv")).unwrap();
    let mut backends = vec!["local", "node"];
    if std::env::var_os("LODESTORE_REQUIRE_S3_SERVERS").is_some() {
        backends.push("s3");
    }
    let header: Vec<&str> = thor.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let (reads_at, read_ahead_at) = (column("archive_reads"), column("read_ahead"));
    for backend in backends {
        let rows: Vec<Vec<&str>> = thor
            .lines()
            .filter(|l| l.starts_with(&format!("as-of,oo7-small,SD-ESM,t1,as-of,{backend},")))
            .map(|l| l.split(',').collect())
            .collect();
        assert_eq!(rows.len(), 4, "{backend}: {thor}");
        let reads = |read_ahead: &str| -> u64 {
            rows.iter()
                .filter(|r| r[read_ahead_at] == read_ahead)
                .map(|r| r[reads_at].parse::<u64>().unwrap())
                .max()
                .unwrap()
        };
        assert!(reads("32") * 4 < reads("1"), "{backend}: {thor}");
    }
    assert!(stdout.contains("(node archive, oo7-small"), "{stdout}");
    for plot in [
        "oo7-oo7-small-t2b-rb0.5MiB-pages",
        "oo1-update-hot",
        "oo1-hot-phases-p0.2",
        "oo1-long-slope",
        "peers/peers",
        "thor-as-of",
        "thor-as-of-node",
    ] {
        for ext in ["svg", "png"] {
            let path = out.join(format!("{plot}.{ext}"));
            assert!(
                std::fs::metadata(&path)
                    .map(|m| m.len() > 1000)
                    .unwrap_or(false),
                "{}",
                path.display()
            );
        }
    }
}

#[test]
fn bad_bench_arguments_are_refused_with_their_names() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (vec!["bench", "oo7", "--preset", "oo7-huge"], "oo7-huge"),
        (vec!["bench", "oo7", "--traversals", "t9"], "t9"),
        (vec!["bench", "oo7", "--schemes", "NOPE"], "NOPE"),
        (vec!["bench", "oo7", "--recovery-buffer", "4XB"], "4XB"),
        (vec!["bench", "oo7", "--clients", "1..9"], "--clients"),
        (vec!["bench", "oo1", "--probabilities", "1.5"], "1.5"),
        (
            vec!["bench", "peers", "--stores", "lmdb,lodestore"],
            "lodestore as its first",
        ),
        (
            vec!["bench", "peers", "--stores", "lodestore,mongo"],
            "mongo",
        ),
        (vec!["bench", "peers", "--threads", "0"], "--threads"),
        // A build without the feature names it and the script that adds RocksDB.
        #[cfg(not(feature = "rocksdb"))]
        (
            vec!["bench", "peers", "--stores", "lodestore,rocksdb"],
            "scripts/bench-rocksdb.sh",
        ),
        (vec!["bench", "thor", "--backends", "local,dht"], "dht"),
        (vec!["bench", "thor", "--backends", "node,node"], "twice"),
        (vec!["bench", "thor", "--read-ahead", "0"], "--read-ahead"),
    ] {
        let output = lodestore()
            .args(&args)
            .arg("--out")
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `bench oo7 --remote --tls`: the clients connect over TLS with certificates made for the run
/// (and a token), commit their updates, and the certificates are gone afterwards.
#[test]
fn oo7_runs_remote_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let output = lodestore()
        .args(["bench", "oo7", "--schemes", "PD-ESM", "--traversals", "t2a"])
        .args([
            "--runs",
            "1",
            "--recovery-buffer",
            "4MiB",
            "--remote",
            "--tls",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    succeeded(&output);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert!(runs[0]["updates"].as_u64().unwrap() > 0);
    assert!(runs[0]["pages_shipped"].as_u64().unwrap() > 0);
    let left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tls-"))
        .collect();
    assert!(left.is_empty(), "certificates left behind");

    // --tls alone is refused: it needs --remote.
    let refused = lodestore()
        .args(["bench", "oo7", "--tls", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--remote"));
}

/// `bench commit`: a row per commit delay and thread count, each with commits measured, in the
/// table and the CSV; a delay out of range or a bad sibling count is refused by flag name.
#[test]
fn bench_commit_measures_every_delay_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("commit.csv");
    let output = lodestore()
        .args(["bench", "commit"])
        .arg(dir.path().join("stores"))
        .args(["--threads", "1,2", "--commit-delay-us", "0,100"])
        .args(["--commit-siblings", "0", "--seconds", "0.2", "--runs", "1"])
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    succeeded(&output);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (threads, rate, delay) = (
        column("threads"),
        column("commits_per_s"),
        column("commit_delay_us"),
    );
    let mut cases: Vec<(String, String)> = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        let commits: f64 = fields[rate].parse().unwrap();
        assert!(commits > 0.0, "{line}");
        cases.push((fields[delay].to_string(), fields[threads].to_string()));
    }
    cases.sort();
    let expected: Vec<(String, String)> = [("0", "1"), ("0", "2"), ("100", "1"), ("100", "2")]
        .iter()
        .map(|(d, t)| (d.to_string(), t.to_string()))
        .collect();
    assert_eq!(cases, expected);

    for (args, flag) in [
        (vec!["--commit-delay-us", "200000"], "--commit-delay-us"),
        (vec!["--commit-siblings", "many"], "--commit-siblings"),
    ] {
        let output = lodestore()
            .args(["bench", "commit"])
            .arg(dir.path().join("stores"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_difflog_compares_the_three_methods_and_writes_csv() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("difflog.csv");
    let out = lodestore()
        .args(["bench", "difflog"])
        .arg(dir.path().join("stores"))
        .args(["--records", "2000", "--transactions", "200", "--runs", "1"])
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    for figure in [
        "bytes logged per transaction",
        "transactions/s",
        "log read ms",
        "level 4 / level 1",
        "dl1p / pl2p",
    ] {
        assert!(stdout.contains(figure), "{figure} missing: {stdout}");
    }
    let rows = std::fs::read_to_string(&csv).unwrap();
    // A header and one run of each method; each logged something and replayed it, and the
    // XOR methods restarted at levels 1, 2 and 4, the baseline at level 2 only.
    assert_eq!(rows.lines().count(), 4, "{rows}");
    let header: Vec<&str> = rows.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for line in rows.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        assert!(
            cells[column("log_bytes")].parse::<u64>().unwrap() > 0,
            "{line}"
        );
        assert!(
            cells[column("records_replayed")].parse::<u64>().unwrap() > 0,
            "{line}"
        );
        assert!(
            cells[column("level2_total_ms")].parse::<f64>().unwrap() > 0.0,
            "{line}"
        );
        let level4 = cells[column("level4_total_ms")];
        if cells[column("method")] == "pl2p" {
            assert!(level4.is_empty(), "{line}");
        } else {
            assert!(level4.parse::<f64>().unwrap() > 0.0, "{line}");
            assert!(
                cells[column("level1_total_ms")].parse::<f64>().unwrap() > 0.0,
                "{line}"
            );
        }
    }
    let out = lodestore()
        .args(["bench", "difflog", "--sweep", "pages=1,2"])
        .arg(dir.path().join("stores"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be swept"));
    let out = lodestore()
        .args(["bench", "difflog", "--streams", "0"])
        .arg(dir.path().join("stores"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--streams"));
}

#[test]
fn bench_difflog_sweeps_streams_on_emulated_disks_and_draws_the_figures() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let out = lodestore()
        .args(["bench", "difflog"])
        .arg(dir.path().join("stores"))
        .args(["--records", "1000", "--transactions", "60", "--runs", "1"])
        .args([
            "--disk-mb-s",
            "20",
            "--sync-ms",
            "0.1",
            "--sweep",
            "streams=1,2",
        ])
        .arg("--plots")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("Against streams"), "{stdout}");
    assert!(stdout.contains("emulated disk of 20.0 MB/s"), "{stdout}");
    assert!(stdout.contains("emulated disks busy"), "{stdout}");
    assert_drawn(
        &plots,
        [
            "difflog-restart",
            "difflog-throughput-by-streams",
            "difflog-log-processing-by-streams",
            "difflog-log-volume-by-streams",
        ]
        .map(String::from),
    );
}

/// Each figure `stem` was drawn into `dir`, as SVG and as PNG, neither empty.
fn assert_drawn(dir: &std::path::Path, stems: impl IntoIterator<Item = String>) {
    for stem in stems {
        for ext in ["svg", "png"] {
            let file = dir.join(format!("{stem}.{ext}"));
            assert!(
                std::fs::metadata(&file).is_ok_and(|m| m.len() > 0),
                "{} missing",
                file.display()
            );
        }
    }
}

/// The complex-object benchmark on a small database: every strategy at every DMP for both
/// cases, with S2's forced end of each subtransaction showing in its level-0 log writes and
/// S2/PS's persistence spheres counted, the paper's figures drawn, and a CSV row per point.
#[test]
fn bench_complex_runs_every_strategy_and_draws_figures_7_and_9() {
    let dir = tempfile::tempdir().unwrap();
    let (plots, csv) = (dir.path().join("plots"), dir.path().join("complex.csv"));
    let out = lodestore()
        .args(["bench", "complex"])
        .arg(dir.path().join("stores"))
        .args([
            "--complex-objects",
            "20",
            "--subobjects",
            "200",
            "--foreign-refs",
            "20",
        ])
        .args([
            "--c",
            "4",
            "--dmp",
            "1,3",
            "--seconds",
            "0.5",
            "--runs",
            "1",
        ])
        .args(["--read-latency-ms", "0.2", "--pool-bytes", "262144"])
        .arg("--csv")
        .arg(&csv)
        .arg("--plots")
        .arg(&plots)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(stdout.contains("S2/PS peaks at DMP"), "{stdout}");
    assert!(stdout.contains("f = 10"), "{stdout}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows.len(),
        2 * 2 * 3,
        "two cases, two DMPs, three strategies"
    );
    let value = |row: &Vec<&str>, name: &str| row[column(name)].parse::<f64>().unwrap();
    for row in &rows {
        assert!(value(row, "committed") > 0.0, "{row:?}");
        let spheres = value(row, "sphere_pages_mean");
        match row[column("strategy")] {
            "s1" => assert_eq!(spheres, 0.0, "S1 has no spheres: {row:?}"),
            _ => assert!(spheres > 0.0, "{row:?}"),
        }
    }
    // At DMP 1, S2 forces the log at each updating subtransaction's end, S2/PS about once a
    // transaction.
    let at_dmp_1 = |strategy: &str| {
        rows.iter()
            .find(|r| r[column("dmp")] == "1" && r[column("strategy")] == strategy)
            .map(|r| value(r, "l0_writes_per_txn"))
            .unwrap()
    };
    assert!(at_dmp_1("s2") > 2.0 * at_dmp_1("s2ps"), "{text}");
    let figures = [
        "throughput",
        "response-time",
        "lock-wait",
        "l0-log-io-rate",
        "sphere-size",
    ];
    assert_drawn(
        &plots,
        [0, 10]
            .iter()
            .flat_map(|f| figures.map(|stem| format!("complex-f{f}-{stem}"))),
    );
}

#[test]
fn bench_complex_refuses_more_foreign_visits_than_visits() {
    let dir = tempfile::tempdir().unwrap();
    let out = lodestore()
        .args(["bench", "complex"])
        .arg(dir.path().join("stores"))
        .args(["--foreign", "11", "--visits", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--foreign 11") && stderr.contains("--visits 10"),
        "{stderr}"
    );
    // More foreign visits than a header has references: refused before the database is built.
    let out = lodestore()
        .args(["bench", "complex"])
        .arg(dir.path().join("stores"))
        .args(["--foreign-refs", "5", "--foreign", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("f = 10 of 5 foreign references"),
        "{stderr}"
    );
    assert!(!dir.path().join("stores").join("complex-objects").exists());
    let out = lodestore()
        .args(["bench", "complex"])
        .arg(dir.path().join("stores"))
        .args(["--dmp", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dmp"));
}

/// Bank transfers as flat transactions and under each multi-level strategy on one store: a
/// row per mode, S2 forcing each subtransaction's end shows in its log flushes, the level-1
/// records in the log bytes per commit, and a CSV row per mode and run. One thread: with
/// more, group commit lets one thread's forced subtransaction end share a flush with
/// another's commit, and the count stops being exact.
#[test]
fn bench_bank_compares_flat_transactions_with_each_strategy() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bank.csv");
    let out = lodestore()
        .args(["bench", "bank"])
        .arg(dir.path().join("stores"))
        .args([
            "--accounts",
            "20",
            "--threads",
            "1",
            "--seconds",
            "0.3",
            "--runs",
            "1",
            "--slice-seconds",
            "0.1",
        ])
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    // Each mode's 0.3 s taken as three slices in turn, summed into one row per mode and run.
    assert!(stdout.contains("in 3 slices of 0.10 s"), "{stdout}");
    for mode in [
        "flat (page locks)",
        "multi-level s1",
        "multi-level s2",
        "multi-level s2ps",
    ] {
        assert!(stdout.contains(mode), "{stdout}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{text}");
    let flushes = |mode: &str| -> f64 {
        let row = rows.iter().find(|r| r[1] == mode).unwrap();
        assert!(
            row[2].parse::<f64>().unwrap() > 0.0,
            "{mode} committed nothing: {text}"
        );
        row[5].parse().unwrap()
    };
    // S2 forces the subtransaction's end and the transaction's: two flushes a commit where a
    // flat transaction has one.
    assert!(flushes("s2") > flushes("flat") + 0.8, "{text}");
    let log_bytes = |mode: &str| -> f64 {
        let row = rows.iter().find(|r| r[1] == mode).unwrap();
        row[6].parse().unwrap()
    };
    // Two levels log the same page changes as a flat transaction and, besides, each
    // operation's level-1 undo record and the transaction's end.
    assert!(log_bytes("flat") > 0.0, "{text}");
    assert!(log_bytes("s2ps") > log_bytes("flat"), "{text}");
    // A round's parts fit in it: with one thread rounds follow each other, so what a round's
    // leader gathered and wrote and synced is within the elapsed time per round (slack only
    // for the CSV's rounding).
    for row in &rows {
        let part = |i: usize| -> f64 { row[i].parse().unwrap() };
        let (round, gather, flush) = (part(9), part(10), part(11));
        assert!(flush > 0.0 && gather >= 0.0, "{text}");
        assert!(gather + flush <= round * 1.01 + 0.1, "{text}");
    }
}

/// A slice too short to measure anything is refused before any store is made, naming the
/// option.
#[test]
fn bench_bank_refuses_a_slice_too_short() {
    let dir = tempfile::tempdir().unwrap();
    let out = lodestore()
        .args(["bench", "bank"])
        .arg(dir.path().join("stores"))
        .args(["--seconds", "0.3", "--slice-seconds", "0.001"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--slice-seconds"), "{stderr}");
    assert!(!dir.path().join("stores").join("bench-bank").exists());
}

/// `bench thor --parts archive-down`: commits that stage page copies, with the archive (a node,
/// and S3 on s3s-fs where the test servers are) up and then stopped, all of them going through.
#[test]
fn bench_thor_commits_while_the_archive_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = vec!["node"];
    if std::env::var_os("LODESTORE_REQUIRE_S3_SERVERS").is_some() {
        backends.push("s3");
    }
    let output = lodestore()
        .args([
            "bench",
            "thor",
            "--preset",
            "oo7-small",
            "--parts",
            "archive-down",
            "--runs",
            "1",
            "--backends",
            &backends.join(","),
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = succeeded(&output);
    assert!(stdout.contains("Thor, archive down"), "{stdout}");
    let csv = std::fs::read_to_string(dir.path().join("thor.csv")).unwrap();
    for backend in backends {
        for mode in ["archive up", "archive down"] {
            let prefix = format!("archive-down,oo7-small,SD-ESM,t2a,{mode},{backend},");
            let commits = csv.lines().filter(|l| l.starts_with(&prefix)).count();
            assert_eq!(commits, 20, "{backend}, {mode}: {csv}");
        }
    }
}

/// `bench peers --crash-updates`: the write-heavy kill -9 runs on every store, Lodestore's
/// restart is reported beside the disk's sequential read bandwidth, and both reach the CSV.
#[test]
fn bench_peers_reopens_after_a_write_heavy_kill() {
    let dir = tempfile::tempdir().unwrap();
    let out = lodestore()
        .args(["bench", "peers", "--stores", "lodestore,sqlite"])
        .args(["--preset", "oo7-small", "--oo1-parts", "0", "--runs", "1"])
        .args(["--traversals", "t1", "--traversal-runs", "1"])
        .args([
            "--threads",
            "1",
            "--seconds",
            "0.1",
            "--crash-updates",
            "14000",
        ])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = succeeded(&out);
    assert!(
        stdout.contains("reopen after write-heavy kill -9"),
        "{stdout}"
    );
    // 14,000 updates of atomic parts leave about 1.1 MiB of log after the last checkpoint,
    // just under its bound of 15,000 records.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Lodestore after a write-heavy kill -9: reopen"))
        .unwrap_or_else(|| panic!("no restart line: {stdout}"));
    let mib: f64 = line
        .split(" reading ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(mib > 0.8, "{line}");
    assert!(line.contains("of the disk's sequential read"), "{line}");
    assert!(stdout.contains("sequential read from the disk"), "{stdout}");
    let csv = std::fs::read_to_string(dir.path().join("peers.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .ends_with(",sequential_read_mb_per_s"),
        "{csv}"
    );
    for store in ["lodestore", "sqlite"] {
        assert!(
            csv.contains(&format!("{store},0,reopen after write-heavy kill -9,ms,")),
            "{csv}"
        );
    }
}
