//! What a closed store leaves on disk: its data file and one log segment of the default size,
//! however much log it wrote while open, so a small store stays small.

use lodestore::{Options, Store};

#[test]
fn a_closed_store_keeps_one_default_log_segment_and_no_spares() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = Store::create(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    // About 6 MiB of log: several segments written, some recycled by checkpoints.
    let mut objects = Vec::new();
    for round in 0..60u32 {
        session
            .transact(|txn| {
                for i in 0..20u32 {
                    let bytes = vec![(round + i) as u8; 5000];
                    objects.push(txn.alloc_bytes(1, &bytes)?);
                }
                Ok(())
            })
            .unwrap();
    }
    let log = store.log_stats();
    assert!(
        log.segments_created + log.segments_reused >= 3,
        "the workload must span several segments: {log:?}"
    );
    drop(session);
    store.close().unwrap();

    let log_dir = path.join("log");
    let names: Vec<String> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let segments: Vec<&String> = names.iter().filter(|n| n.starts_with("segment-")).collect();
    assert_eq!(segments.len(), 1, "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("spare-")), "{names:?}");
    let segment_len = std::fs::metadata(log_dir.join(segments[0])).unwrap().len();
    assert_eq!(
        segment_len,
        4096 + (1 << 20),
        "a default segment: header and 1 MiB"
    );

    // It reopens with every object.
    let store = Store::open(&path, Options::new()).unwrap();
    let mut session = store.session().unwrap();
    let mut txn = session.begin().unwrap();
    for (n, oid) in objects.iter().enumerate() {
        assert_eq!(txn.info(*oid).unwrap().len, 5000, "object {n}");
    }
}
