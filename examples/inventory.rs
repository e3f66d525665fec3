//! A small inventory on Lodestore: items as typed objects, an index from SKU to item kept in a
//! persistent `BTreeMap`, transfers between warehouses run by several threads at once through
//! retrying transactions, a scan of every item by type, and a reader that sees the stock as
//! it was at a snapshot while writers go on.
//!
//! ```sh
//! cargo run -p lodestore --example inventory            # in a temporary folder
//! cargo run -p lodestore --example inventory -- ./shop  # in a new store of that name
//! ```

use lodestore::{AsOf, BTreeMap, Oid, Options, Persistent, Result, Store};
use std::path::Path;

#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Item {
    /// Units in each of two warehouses.
    stock: [u64; 2],
    price_cents: u64,
}
impl Persistent for Item {
    const TYPE_ID: u32 = 1;
}

const ITEMS: u64 = 500;
const THREADS: usize = 4;
const TRANSFERS_PER_THREAD: u64 = 200;

fn sku(i: u64) -> String {
    format!("SKU-{i:05}")
}

/// Builds the inventory, moves stock around from several threads, and checks that nothing was
/// lost: the units in all warehouses stay what they were.
fn run(path: &Path) -> Result<()> {
    let store = Store::create(path, Options::new().snapshots(true))?;
    let mut session = store.session()?;

    // One transaction: the items and the index that finds them by SKU.
    let index = session.transact(|txn| {
        let index: BTreeMap<String, Oid<Item>> = BTreeMap::create(txn)?;
        for i in 0..ITEMS {
            let item = txn.alloc(&Item {
                stock: [100, 0],
                price_cents: 199 + i,
            })?;
            index.insert(txn, &sku(i), &item)?;
        }
        txn.set_root("index", index.oid())?;
        Ok(index)
    })?;
    let before = store.snapshot()?;
    println!("{ITEMS} items indexed; snapshot {} taken", before.id);

    // Transfers from several threads. Two transfers of one item conflict on its page; the
    // loser of a deadlock is aborted and `transact` runs it again.
    std::thread::scope(|scope| -> Result<()> {
        let workers: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let store = &store;
                scope.spawn(move || -> Result<()> {
                    let mut session = store.session()?;
                    for n in 0..TRANSFERS_PER_THREAD {
                        let i = (t * 7919 + n * 104_729) % ITEMS;
                        session.transact(|txn| {
                            let item = index.get(txn, &sku(i))?.expect("every SKU is indexed");
                            let item = txn.get_mut(item)?;
                            let units = item.stock[0].min(3);
                            item.stock[0] -= units;
                            item.stock[1] += units;
                            Ok(())
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("a worker panicked")?;
        }
        Ok(())
    })?;

    // A range of the index, and every item by a scan of its type.
    let mut txn = session.begin()?;
    let first_ten: Vec<String> = index
        .range(&mut txn, sku(0)..sku(10))
        .map(|entry| entry.map(|(sku, _)| sku))
        .collect::<Result<_>>()?;
    println!("first SKUs: {}", first_ten.join(", "));
    let items: Vec<Oid<Item>> = txn.objects_of::<Item>().collect::<Result<_>>()?;
    let mut total = [0u64; 2];
    for item in &items {
        let item = txn.get(*item)?;
        total[0] += item.stock[0];
        total[1] += item.stock[1];
    }
    println!(
        "{} items: {} units in warehouse A, {} in warehouse B",
        items.len(),
        total[0],
        total[1]
    );
    assert_eq!(
        total[0] + total[1],
        ITEMS * 100,
        "units were lost or made up"
    );
    assert_eq!(index.len(&mut txn)?, ITEMS);
    let report = index.check(&mut txn)?;
    println!(
        "index: {} entries in {} nodes, {} inner levels",
        report.entries, report.nodes, report.height
    );
    let first = index.get(&mut txn, &sku(0))?.expect("indexed");
    let now = txn.read(first)?;
    txn.commit()?;

    // A reader as of the snapshot: no locks, the stock as it was before the transfers.
    let mut reader = session.begin_as_of(AsOf::Snapshot(before.id))?;
    let then = reader.read(first)?;
    println!(
        "{}: {:?} now, {:?} at snapshot {}",
        sku(0),
        now.stock,
        then.stock,
        before.id
    );
    assert_eq!(then.stock, [100, 0]);
    Ok(())
}

fn main() -> Result<()> {
    match std::env::args_os().nth(1) {
        Some(path) => run(Path::new(&path)),
        None => {
            let dir = tempfile::tempdir()
                .map_err(|e| lodestore::Error::InvalidArgument(e.to_string()))?;
            run(&dir.path().join("inventory"))
        }
    }
}

#[test]
fn the_example_runs() {
    let dir = tempfile::tempdir().unwrap();
    run(&dir.path().join("inventory")).unwrap();
}
