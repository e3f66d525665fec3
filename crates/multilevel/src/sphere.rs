//! Persistence spheres (Hasse & Weikum section 2, "Deferred Log Writes"). With S2/PS a
//! subtransaction's after-images are not written at its end (EOS): the pages stay dirty in
//! the pool and are written to the L0 log later, at the end of a transaction (EOT) or when a
//! dirty page must leave the pool. Page locks end at EOS, so one page may by then hold the
//! changes of several completed subtransactions of different transactions; writing it writes
//! all of them, and each of those subtransactions must then have all of its pages written in
//! the same atomic write, or the redo pass would bring back part of a subtransaction.
//!
//! The paper's definition: the sphere of a subtransaction holds the pages it modified; when a
//! page of its sphere was also modified by another subtransaction, or read by one after the
//! first one's EOS, the two spheres merge. A transaction's sphere is the union of its
//! subtransactions'. Merging is symmetric and transitive, so the spheres are the classes of
//! an equivalence over the subtransactions whose changes are not yet in the log; this module
//! keeps those classes (merging the smaller into the larger) and hands a whole sphere out,
//! and forgets it, when it is to be written.
//!
//! A subtransaction's changes reach the server at its EOS (the client ships them then), so
//! the pages the server holds only ever carry completed subtransactions' changes; a read is
//! noted when it happens, an active reader joining the sphere of the page's writers.

use lodestore_core::{PageId, TxnId};
use rustc_hash::{FxHashMap, FxHashSet};

/// Pages to write to the L0 log in one atomic write, and the subtransactions whose changes
/// they carry (or who read them), both sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sphere {
    pub pages: Vec<PageId>,
    pub subs: Vec<TxnId>,
}

impl Sphere {
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty() && self.subs.is_empty()
    }
}

#[derive(Debug, Default)]
struct Class {
    subs: Vec<TxnId>,
    pages: Vec<PageId>,
}

/// The persistence spheres of the subtransactions whose changes are not yet in the L0 log.
#[derive(Debug, Default)]
pub struct Spheres {
    classes: FxHashMap<u64, Class>,
    class_of_sub: FxHashMap<TxnId, u64>,
    class_of_page: FxHashMap<PageId, u64>,
    parent_of: FxHashMap<TxnId, TxnId>,
    subs_of_parent: FxHashMap<TxnId, FxHashSet<TxnId>>,
    next_class: u64,
}

impl Spheres {
    pub fn new() -> Spheres {
        Spheres::default()
    }

    /// Active subtransaction `sub` of `parent` read `page`: if completed subtransactions left
    /// changes on it that are not yet logged, `sub` joins their sphere.
    pub fn read(&mut self, sub: TxnId, parent: TxnId, page: PageId) {
        if let Some(&class) = self.class_of_page.get(&page) {
            self.join(sub, parent, class);
        }
    }

    /// Subtransaction `sub` of `parent` ended having modified `modified`, which the server now
    /// holds and has not logged.
    pub fn end_of_subtransaction(&mut self, sub: TxnId, parent: TxnId, modified: &[PageId]) {
        for &page in modified {
            match self.class_of_page.get(&page) {
                Some(&class) => self.join(sub, parent, class),
                None => {
                    let class = match self.class_of_sub.get(&sub) {
                        Some(&class) => class,
                        None => self.new_class(sub, parent),
                    };
                    self.class_of_page.insert(page, class);
                    self.class_mut(class).pages.push(page);
                }
            }
        }
    }

    /// Takes out the sphere `txn` must write at its end: every sphere one of its
    /// subtransactions is in, merged. Empty when nothing of `txn` awaits the log.
    pub fn take_for_transaction(&mut self, txn: TxnId) -> Sphere {
        let classes: FxHashSet<u64> = self
            .subs_of_parent
            .get(&txn)
            .into_iter()
            .flatten()
            .map(|sub| self.class_of_sub[sub])
            .collect();
        self.take(classes)
    }

    /// Takes out the sphere that must be written before `page` leaves the pool: that of the
    /// subtransactions whose changes it holds (the last one to modify it among them).
    pub fn take_for_page(&mut self, page: PageId) -> Sphere {
        let classes = self.class_of_page.get(&page).copied().into_iter().collect();
        self.take(classes)
    }

    /// Takes out the sphere subtransaction `sub` is in (empty if a write took it already):
    /// what a forced end of `sub` writes.
    pub fn take_for_sub(&mut self, sub: TxnId) -> Sphere {
        let classes = self.class_of_sub.get(&sub).copied().into_iter().collect();
        self.take(classes)
    }

    /// Pages of the sphere `sub` is in (0 when none: written already, or nothing changed).
    pub fn pages_of_sub(&self, sub: TxnId) -> usize {
        self.class_of_sub
            .get(&sub)
            .and_then(|class| self.classes.get(class))
            .map_or(0, |class| class.pages.len())
    }

    /// Takes out every sphere (a checkpoint writes everything not yet logged).
    pub fn take_all(&mut self) -> Sphere {
        let classes = self.classes.keys().copied().collect();
        self.take(classes)
    }

    /// Pages whose changes are not yet logged.
    pub fn unlogged_pages(&self) -> usize {
        self.class_of_page.len()
    }

    /// Whether `page` holds changes not yet logged.
    pub fn is_unlogged(&self, page: PageId) -> bool {
        self.class_of_page.contains_key(&page)
    }

    fn new_class(&mut self, sub: TxnId, parent: TxnId) -> u64 {
        let class = self.next_class;
        self.next_class += 1;
        self.classes.insert(class, Class::default());
        self.add_sub(sub, parent, class);
        class
    }

    fn class_mut(&mut self, class: u64) -> &mut Class {
        self.classes.get_mut(&class).expect("a live class")
    }

    fn add_sub(&mut self, sub: TxnId, parent: TxnId, class: u64) {
        self.class_of_sub.insert(sub, class);
        self.class_mut(class).subs.push(sub);
        self.parent_of.insert(sub, parent);
        self.subs_of_parent.entry(parent).or_default().insert(sub);
    }

    /// Puts `sub` into `class`, merging its own class into it if it has one.
    fn join(&mut self, sub: TxnId, parent: TxnId, class: u64) {
        match self.class_of_sub.get(&sub) {
            None => self.add_sub(sub, parent, class),
            Some(&own) if own != class => self.merge(own, class),
            Some(_) => {}
        }
    }

    /// Merges classes `a` and `b`, moving the smaller one's members.
    fn merge(&mut self, a: u64, b: u64) {
        let size = |c: &Class| c.subs.len() + c.pages.len();
        let (into, from) = if size(&self.classes[&a]) >= size(&self.classes[&b]) {
            (a, b)
        } else {
            (b, a)
        };
        let moved = self.classes.remove(&from).expect("a live class");
        for &sub in &moved.subs {
            self.class_of_sub.insert(sub, into);
        }
        for &page in &moved.pages {
            self.class_of_page.insert(page, into);
        }
        let target = self.class_mut(into);
        target.subs.extend(moved.subs);
        target.pages.extend(moved.pages);
    }

    fn take(&mut self, classes: FxHashSet<u64>) -> Sphere {
        let mut sphere = Sphere::default();
        for class in classes {
            let taken = self.classes.remove(&class).expect("a live class");
            for &page in &taken.pages {
                self.class_of_page.remove(&page);
            }
            for &sub in &taken.subs {
                self.class_of_sub.remove(&sub);
                let parent = self.parent_of.remove(&sub).expect("a sub's parent");
                if let Some(subs) = self.subs_of_parent.get_mut(&parent) {
                    subs.remove(&sub);
                    if subs.is_empty() {
                        self.subs_of_parent.remove(&parent);
                    }
                }
            }
            sphere.pages.extend(taken.pages);
            sphere.subs.extend(taken.subs);
        }
        sphere.pages.sort_unstable();
        sphere.subs.sort_unstable();
        debug_assert!(sphere.pages.windows(2).all(|w| w[0] < w[1]));
        sphere
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn pages(list: &[u32]) -> Vec<PageId> {
        list.iter().map(|&p| PageId(p)).collect()
    }

    /// The paper's Figure 1 and 4: T1's subtransactions T11 (pages p, q) and T12 (r, s), T2's
    /// T21 (p, r). T2's sphere at its end holds all four pages.
    #[test]
    fn the_papers_example() {
        let (p, q, r, s) = (1, 2, 3, 4);
        let (t1, t2) = (TxnId(1), TxnId(2));
        let (t11, t12, t21) = (TxnId(11), TxnId(12), TxnId(21));
        let mut sp = Spheres::new();
        sp.end_of_subtransaction(t11, t1, &pages(&[p, q]));
        sp.end_of_subtransaction(t21, t2, &pages(&[p, r]));
        sp.end_of_subtransaction(t12, t1, &pages(&[r, s]));
        let sphere = sp.take_for_transaction(t2);
        assert_eq!(sphere.pages, pages(&[p, q, r, s]));
        assert_eq!(sphere.subs, vec![t11, t12, t21]);
        assert_eq!(sp.unlogged_pages(), 0);
        assert!(sp.take_for_transaction(t1).is_empty());
    }

    #[test]
    fn a_read_after_eos_merges_and_disjoint_spheres_stay_apart() {
        let mut sp = Spheres::new();
        sp.end_of_subtransaction(TxnId(11), TxnId(1), &pages(&[1]));
        sp.end_of_subtransaction(TxnId(31), TxnId(3), &pages(&[9]));
        sp.read(TxnId(21), TxnId(2), PageId(1));
        sp.end_of_subtransaction(TxnId(21), TxnId(2), &pages(&[5]));
        let sphere = sp.take_for_transaction(TxnId(2));
        assert_eq!(sphere.pages, pages(&[1, 5]));
        assert_eq!(sp.take_for_page(PageId(9)).subs, vec![TxnId(31)]);
        assert_eq!(sp.unlogged_pages(), 0);
    }

    /// The definition, computed from scratch: completed subtransactions whose changes are not
    /// logged, the reads noted (reader, writer), and the closure over shared pages and reads.
    #[derive(Default)]
    struct Definition {
        unlogged: BTreeMap<TxnId, (TxnId, BTreeSet<PageId>)>,
        reads: Vec<(TxnId, TxnId, TxnId)>,
    }

    impl Definition {
        fn read(&mut self, sub: TxnId, parent: TxnId, page: PageId) {
            let writers: Vec<TxnId> = self
                .unlogged
                .iter()
                .filter(|(_, (_, p))| p.contains(&page))
                .map(|(s, _)| *s)
                .collect();
            for w in writers {
                self.reads.push((sub, parent, w));
            }
        }

        /// Subtransactions and their parents still bound to an unlogged writer.
        fn members(&self) -> BTreeMap<TxnId, TxnId> {
            let mut m: BTreeMap<TxnId, TxnId> =
                self.unlogged.iter().map(|(s, (t, _))| (*s, *t)).collect();
            for &(r, t, w) in &self.reads {
                if self.unlogged.contains_key(&w) {
                    m.insert(r, t);
                }
            }
            m
        }

        fn closure(&self, start: BTreeSet<TxnId>) -> BTreeSet<TxnId> {
            let mut set = start;
            loop {
                let mut grown = set.clone();
                for (a, (_, pa)) in &self.unlogged {
                    for (b, (_, pb)) in &self.unlogged {
                        if (set.contains(a) || set.contains(b)) && !pa.is_disjoint(pb) {
                            grown.insert(*a);
                            grown.insert(*b);
                        }
                    }
                }
                for &(r, _, w) in &self.reads {
                    if self.unlogged.contains_key(&w) && (set.contains(&r) || set.contains(&w)) {
                        grown.insert(r);
                        grown.insert(w);
                    }
                }
                if grown == set {
                    return set;
                }
                set = grown;
            }
        }

        fn take(&mut self, start: BTreeSet<TxnId>) -> Sphere {
            let set = self.closure(start);
            let mut pages = BTreeSet::new();
            for s in &set {
                if let Some((_, p)) = self.unlogged.remove(s) {
                    pages.extend(p);
                }
            }
            // A reader whose writers are all logged now is bound to nothing.
            self.reads
                .retain(|&(r, _, w)| !set.contains(&r) && self.unlogged.contains_key(&w));
            Sphere {
                pages: pages.into_iter().collect(),
                subs: set.into_iter().collect(),
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        Begin(usize),
        Read(usize, u32),
        End(usize, Vec<u32>),
        Commit(usize),
        Evict(u32),
        Checkpoint,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0usize..4).prop_map(Step::Begin),
            3 => (0usize..4, 0u32..10).prop_map(|(t, p)| Step::Read(t, p)),
            4 => (0usize..4, proptest::collection::vec(0u32..10, 0..4)).prop_map(|(t, p)| Step::End(t, p)),
            2 => (0usize..4).prop_map(Step::Commit),
            1 => (0u32..10).prop_map(Step::Evict),
            1 => Just(Step::Checkpoint),
        ]
    }

    proptest! {
        /// On random interleavings of four transaction slots, every sphere handed out equals
        /// the definition's closure at that moment.
        #[test]
        fn spheres_equal_the_definitions_closure(steps in proptest::collection::vec(step(), 1..120)) {
            let mut sp = Spheres::new();
            let mut def = Definition::default();
            let mut next_id = 100u64;
            // Per slot: its transaction, and its active subtransaction.
            let mut slots: Vec<(TxnId, Option<TxnId>)> = (0..4).map(|i| (TxnId(1 + i), None)).collect();
            for step in steps {
                match step {
                    Step::Begin(t) => {
                        if slots[t].1.is_none() {
                            next_id += 1;
                            slots[t].1 = Some(TxnId(next_id));
                        }
                    }
                    Step::Read(t, p) => {
                        if let Some(sub) = slots[t].1 {
                            sp.read(sub, slots[t].0, PageId(p));
                            def.read(sub, slots[t].0, PageId(p));
                        }
                    }
                    Step::End(t, mut pages) => {
                        if let Some(sub) = slots[t].1.take() {
                            pages.sort_unstable();
                            pages.dedup();
                            let pages: Vec<PageId> = pages.into_iter().map(PageId).collect();
                            sp.end_of_subtransaction(sub, slots[t].0, &pages);
                            if !pages.is_empty() {
                                def.unlogged.insert(sub, (slots[t].0, pages.into_iter().collect()));
                            }
                        }
                    }
                    Step::Commit(t) => {
                        if slots[t].1.is_none() {
                            let txn = slots[t].0;
                            let start = def.members().into_iter().filter(|(_, p)| *p == txn).map(|(s, _)| s).collect();
                            prop_assert_eq!(sp.take_for_transaction(txn), def.take(start));
                            next_id += 1;
                            slots[t].0 = TxnId(next_id);
                        }
                    }
                    Step::Evict(p) => {
                        let start = def.unlogged.iter().filter(|(_, (_, ps))| ps.contains(&PageId(p))).map(|(s, _)| *s).collect();
                        prop_assert_eq!(sp.take_for_page(PageId(p)), def.take(start));
                    }
                    Step::Checkpoint => {
                        let start = def.members().into_keys().collect();
                        prop_assert_eq!(sp.take_all(), def.take(start));
                    }
                }
                prop_assert_eq!(sp.unlogged_pages(), def.unlogged.values().flat_map(|(_, p)| p).collect::<BTreeSet<_>>().len());
            }
        }
    }
}
