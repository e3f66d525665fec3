//! A hostile tester with the release binary: kill -9 a `lodestore stress` run, damage the
//! store's files from outside, and check as an outside tool would that no acknowledged transfer
//! is silently missing: either the bank holds them all, or opening and `check` fail naming the
//! damaged file. `check`, `info` and `dump` never change a byte of a store; `demo --replace`
//! never removes a store in use; a damaged free page hides no object from `dump`; `salvage`
//! copies out everything readable, with OIDs kept.

mod common;

use common::{check_bank, lodestore, stress_on};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

const ACCOUNTS: usize = 200;

/// Runs `stress` on a new store (log segments of 256 KiB) for `seconds` and kills it with
/// SIGKILL. Returns the store and the file of acknowledged transfers.
fn stressed_store(dir: &Path, seconds: u64) -> (PathBuf, PathBuf) {
    stressed_store_spanning(dir, seconds, 0)
}

/// `stressed_store`, run on past `seconds` until the log spans `segments_min` segments (or for
/// at most 50 s): how much log a few seconds write depends on the machine.
fn stressed_store_spanning(dir: &Path, seconds: u64, segments_min: usize) -> (PathBuf, PathBuf) {
    let store = dir.join("bank");
    let acks = dir.join("acks");
    // Small log segments, so that a few seconds of transfers span many of them.
    let out = run(&[
        "init",
        store.to_str().unwrap(),
        "--log-segment-bytes",
        "262144",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // No checkpoint during the run (it would recycle the segments the tests damage).
    let mut child = stress_on(&store, &acks, ACCOUNTS, 2, 60)
        .args(["--checkpoint-records", "100000000"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(seconds));
    let deadline = std::time::Instant::now() + Duration::from_secs(50);
    while segments(&store).len() < segments_min && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    (store, acks)
}

fn run(args: &[&str]) -> Output {
    lodestore().args(args).output().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every file under `dir` with its bytes' checksum and its length.
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u32, u64)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path, (crc32c::crc32c(&bytes), bytes.len() as u64));
            }
        }
    }
    files
}

fn segments(store: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(store.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("segment-")
        })
        .collect();
    found.sort();
    found
}

#[test]
fn inspection_leaves_every_file_unchanged_after_kill_minus_nine_and_on_a_clean_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, acks) = stressed_store(dir.path(), 2);
    let path = store.to_str().unwrap();
    let before = fingerprint(&store);
    for args in [
        vec!["check", path],
        vec!["check", path, "--no-recover"],
        vec!["info", path],
        vec!["info", path, "--json"],
        vec!["dump", path],
        vec!["dump", path, "--json"],
    ] {
        let out = run(&args);
        // check says 3: sound once recovered, the recovery not written.
        let expected = if args == ["check", path] { 3 } else { 0 };
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{args:?}: {}",
            text(&out)
        );
        assert_eq!(fingerprint(&store), before, "{args:?} changed the store");
    }
    // check lists what recovery would write, file by file, the data file's pages by number.
    let said = text(&run(&["check", path]));
    assert!(said.contains("changes redone"), "{said}");
    assert!(
        said.contains("recovery would write") && said.contains("volume-0.data pages"),
        "{said}"
    );
    // What dump shows (recovered in memory) holds every acknowledged transfer.
    let transfers = check_bank(&store, &[&acks], ACCOUNTS, 0);
    assert!(transfers > 100, "only {transfers} transfers acknowledged");
    assert_eq!(fingerprint(&store), before);

    // `recover` writes; afterwards the store is clean and inspection still writes nothing.
    let out = run(&["recover", path]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("changes redone"), "{}", text(&out));
    let out = run(&["recover", path]);
    assert!(text(&out).contains("closed cleanly"), "{}", text(&out));
    let clean = fingerprint(&store);
    for args in [vec!["check", path], vec!["info", path], vec!["dump", path]] {
        let out = run(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        assert_eq!(fingerprint(&store), clean, "{args:?} changed a clean store");
    }
    check_bank(&store, &[&acks], ACCOUNTS, 1);
}

#[test]
fn damaged_superblock_copy_of_a_clean_store_is_a_problem_not_a_silent_repair() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let path = store.to_str().unwrap();
    let out = run(&["demo", path, "--objects", "500"]);
    assert!(out.status.success(), "{}", text(&out));
    let data = store.join("volume-0.data");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[100] ^= 0xff; // inside superblock copy 0
    std::fs::write(&data, &bytes).unwrap();
    let before = fingerprint(&store);
    let out = run(&["check", path]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("page 0: superblock copy 0 is damaged"),
        "{}",
        text(&out)
    );
    assert_eq!(fingerprint(&store), before, "check repaired the store");
}

/// Kills a stress run, damages the log as `damage` says, and asserts that opening (`recover`)
/// and `check` both fail naming the damaged file: never a store that opens with acknowledged
/// transfers missing.
fn damaged_log_is_refused(name: &str, damage: impl FnOnce(&Path) -> PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (store, acks) = stressed_store_spanning(dir.path(), 2, 3);
    let transfers = check_bank(&store, &[&acks], ACCOUNTS, 0);
    assert!(transfers > 100, "{name}: only {transfers} transfers");
    let segments_in_use = segments(&store).len();
    assert!(
        segments_in_use >= 3,
        "{name}: only {segments_in_use} segments"
    );
    let named = damage(&store);
    let file_name = named.file_name().unwrap().to_str().unwrap().to_string();
    let path = store.to_str().unwrap();
    for args in [
        vec!["check", path],
        vec!["recover", path],
        vec!["dump", path],
    ] {
        let out = run(&args);
        assert!(
            !out.status.success(),
            "{name}: {args:?} succeeded on a damaged log: {}",
            text(&out)
        );
        assert!(
            text(&out).contains(&file_name),
            "{name}: {args:?} does not name {file_name}: {}",
            text(&out)
        );
    }
}

#[test]
fn a_shortened_last_segment_is_refused_naming_it() {
    damaged_log_is_refused("cut at 200,001 bytes", |store| {
        let last = segments(store).pop().unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        file.set_len(200_001).unwrap();
        last
    });
    damaged_log_is_refused("cut at 5,000 bytes", |store| {
        let last = segments(store).pop().unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        file.set_len(5000).unwrap();
        last
    });
}

#[test]
fn a_deleted_or_renumbered_segment_is_refused_naming_it() {
    damaged_log_is_refused("last segment deleted", |store| {
        let last = segments(store).pop().unwrap();
        std::fs::remove_file(&last).unwrap();
        last
    });
    damaged_log_is_refused("a middle segment deleted", |store| {
        let all = segments(store);
        let middle = all[all.len() / 2].clone();
        std::fs::remove_file(&middle).unwrap();
        middle
    });
    damaged_log_is_refused("segment renumbered", |store| {
        let last = segments(store).pop().unwrap();
        let index: u64 = last
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_start_matches("segment-")
            .trim_end_matches(".log")
            .parse()
            .unwrap();
        let renamed = store
            .join("log")
            .join(format!("segment-{:010}.log", index + 1));
        std::fs::rename(&last, &renamed).unwrap();
        renamed
    });
}

/// `dump --json` of a store: every object's OID with its bytes.
fn objects_of(store: &Path) -> BTreeMap<u64, String> {
    objects_of_output(&run(&["dump", store.to_str().unwrap(), "--json"]))
}

#[test]
fn salvage_after_kill_minus_nine_keeps_every_acknowledged_transfer_and_every_oid() {
    let dir = tempfile::tempdir().unwrap();
    let (store, acks) = stressed_store(dir.path(), 2);
    let before = fingerprint(&store);
    let copy = dir.path().join("copy");
    let out = run(&["salvage", store.to_str().unwrap(), copy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("every committed change"),
        "{}",
        text(&out)
    );
    assert_eq!(fingerprint(&store), before, "salvage wrote to its source");
    check_bank(&copy, &[&acks], ACCOUNTS, 0);
    assert_eq!(objects_of(&copy), objects_of(&store));
    // The copy is a store of its own: it takes new work.
    let out = run(&[
        "stress",
        copy.to_str().unwrap(),
        "--accounts",
        &ACCOUNTS.to_string(),
        "--threads",
        "1",
        "--seconds",
        "0.3",
        "--acks",
        dir.path().join("acks-copy").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn salvage_without_a_log_and_with_a_damaged_page_copies_everything_else() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    let path = store.to_str().unwrap();
    let out = run(&["demo", path, "--objects", "5000"]);
    assert!(out.status.success(), "{}", text(&out));
    let original = objects_of(&store);
    // The log is gone, and one data page (page 10, 8 KiB pages) has a flipped byte.
    std::fs::remove_dir_all(store.join("log")).unwrap();
    let data = store.join("volume-0.data");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[10 * 8192 + 500] ^= 0xff;
    std::fs::write(&data, &bytes).unwrap();
    let dump = run(&["dump", path]);
    assert!(!dump.status.success(), "dump read a store without a log");

    let copy = dir.path().join("copy");
    let out = run(&["salvage", path, copy.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("unusable"), "{said}");
    assert!(said.contains("damaged page 10 left out"), "{said}");
    let salvaged = objects_of(&copy);
    // Every object copied is the original at the same OID; only page 10's objects are missing.
    for (oid, bytes) in &salvaged {
        assert_eq!(original.get(oid), Some(bytes), "object {oid} changed");
    }
    let page_of = |oid: u64| (oid >> 16) & 0xffff_ffff;
    let missing: Vec<u64> = original
        .keys()
        .filter(|oid| !salvaged.contains_key(oid))
        .copied()
        .collect();
    assert!(!missing.is_empty());
    assert!(
        missing.iter().all(|&oid| page_of(oid) == 10),
        "objects lost from pages other than 10: {missing:?}"
    );
    let check = run(&["check", copy.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check));
    // An existing store is never overwritten.
    let again = run(&["salvage", path, copy.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
}

#[test]
fn demo_replace_refuses_a_store_in_use_and_replaces_an_idle_one_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("bank");
    let acks = dir.path().join("acks");
    let path = store.to_str().unwrap();
    let mut child = stress_on(&store, &acks, 50, 1, 60).spawn().unwrap();
    let started = std::time::Instant::now();
    while common::acknowledged(&acks).0 < 50 {
        assert!(started.elapsed() < Duration::from_secs(20), "no transfers");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(&["demo", path, "--objects", "100", "--replace"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("in use"), "{}", text(&out));
    assert!(store.join("volume-0.data").exists() && store.join("log").exists());
    child.kill().unwrap();
    child.wait().unwrap();
    check_bank(&store, &[&acks], 50, 0);

    // Idle, the store is replaced whole: nothing of the bank is left.
    let out = run(&["demo", path, "--objects", "100", "--replace"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = run(&["dump", path]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("root bank"), "{}", text(&out));
    assert!(text(&out).contains("root parts"), "{}", text(&out));
}

#[test]
fn a_flipped_byte_in_a_free_page_is_named_and_dump_shows_every_object() {
    let dir = tempfile::tempdir().unwrap();
    // The store grows by whole extents, so its last page is free: formatted, never used.
    let out = run(&[
        "demo",
        dir.path().join("d").to_str().unwrap(),
        "--objects",
        "300",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let demo = dir.path().join("d");
    let before = objects_of(&demo);
    let data = demo.join("volume-0.data");
    let mut bytes = std::fs::read(&data).unwrap();
    let pages = bytes.len() / 8192;
    let last = pages - 1;
    assert_eq!(
        lodestore_storage::page::kind(&bytes[last * 8192..]),
        Some(lodestore_storage::PageKind::Free)
    );
    bytes[last * 8192 + 700] ^= 0x10;
    std::fs::write(&data, &bytes).unwrap();
    let out = run(&["dump", demo.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("page {last}")),
        "{}",
        text(&out)
    );
    assert_eq!(objects_of_output(&out), before);
    let out = run(&["check", demo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

/// Every object's OID with its bytes, from the output of `dump --json`.
fn objects_of_output(out: &Output) -> BTreeMap<u64, String> {
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    dump["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["oid"].as_u64().unwrap(),
                o["bytes"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Mounts `dir` read-only at a new folder for the life of the value (a bind mount; needs the
/// privilege to mount, which root has on the project's machines).
struct ReadOnlyMount {
    at: PathBuf,
}

impl ReadOnlyMount {
    fn new(dir: &Path, at: PathBuf) -> Option<ReadOnlyMount> {
        std::fs::create_dir_all(&at).unwrap();
        let mount = |args: &[&str]| {
            std::process::Command::new("mount")
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let (dir_arg, at_arg) = (dir.to_str().unwrap(), at.to_str().unwrap().to_string());
        if !mount(&["--bind", dir_arg, &at_arg]) {
            return None;
        }
        let mounted = ReadOnlyMount { at };
        assert!(
            mount(&["-o", "remount,ro,bind", &at_arg]),
            "bind mount made but not read-only"
        );
        Some(mounted)
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.at).status();
    }
}

#[test]
fn a_store_on_a_read_only_file_system_is_checked_and_dumped_even_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (store, acks) = stressed_store(dir.path(), 1);
    let Some(mount) = ReadOnlyMount::new(&store, dir.path().join("read-only")) else {
        eprintln!("skipped: this process may not mount a read-only view (not root)");
        return;
    };
    let path = mount.at.to_str().unwrap();
    assert!(
        std::fs::write(mount.at.join("probe"), b"x").is_err(),
        "the mount is writable"
    );
    for args in [vec!["check", path], vec!["info", path], vec!["dump", path]] {
        let out = run(&args);
        let expected = if args[0] == "check" { 3 } else { 0 };
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{args:?}: {}",
            text(&out)
        );
    }
    check_bank(&mount.at, &[&acks], ACCOUNTS, 0);
    // Opening for writing is refused with the operating system's reason, naming the file.
    let out = run(&["recover", path]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("Read-only file system"),
        "{}",
        text(&out)
    );
}
