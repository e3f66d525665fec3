//! The time of committed transactions by phase (Hosking, Brown & Moss section 5): each phase is
//! charged for the work it names, and only committed transactions count.

use bytemuck::{Pod, Zeroable};
use lodestore::{Oid, Options, Persistent, Scheme, Store};
use std::time::Duration;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Part {
    value: u64,
    padding: [u64; 15],
}
impl Persistent for Part {
    const TYPE_ID: u32 = 21;
}

const PAUSE: Duration = Duration::from_millis(50);

fn store(dir: &std::path::Path) -> Store {
    let options = Options::new()
        .page_size(4096)
        .scheme(Scheme::SD_ESM)
        .client_cache_bytes(8 << 20)
        .server_pool_bytes(8 << 20);
    Store::create(dir.join("s"), options).unwrap()
}

#[test]
fn each_phase_is_charged_for_its_own_work() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let mut session = store.session().unwrap();

    // New objects only, with a pause while the transaction runs.
    let mut txn = session.begin().unwrap();
    let parts: Vec<Oid<Part>> = (0..2000)
        .map(|i| {
            txn.alloc(&Part {
                value: i,
                ..Part::zeroed()
            })
            .unwrap()
        })
        .collect();
    std::thread::sleep(PAUSE);
    txn.commit().unwrap();
    let creating = session.stats().phases;
    assert!(creating.running >= PAUSE, "{creating:?}");
    assert!(creating.new_objects > Duration::ZERO, "{creating:?}");
    assert!(creating.write > Duration::ZERO, "{creating:?}");

    // Existing objects only: no page is new, so nothing is charged to new objects.
    let mut txn = session.begin().unwrap();
    for &part in &parts {
        txn.get_mut(part).unwrap().value += 1;
    }
    txn.commit().unwrap();
    let updating = session.stats().phases.since(&creating);
    assert_eq!(updating.new_objects, Duration::ZERO, "{updating:?}");
    assert!(updating.old_objects > Duration::ZERO, "{updating:?}");
    assert!(updating.write > Duration::ZERO, "{updating:?}");
    assert!(updating.running < PAUSE, "{updating:?}");

    // An aborted transaction adds nothing.
    let before = session.stats().phases;
    let mut txn = session.begin().unwrap();
    txn.get_mut(parts[0]).unwrap().value += 1;
    std::thread::sleep(PAUSE);
    txn.abort().unwrap();
    assert_eq!(session.stats().phases, before);
    assert_eq!(
        before.total(),
        before.running + before.old_objects + before.new_objects + before.write + before.other
    );
}
