//! The blocks in use of the OpenTelemetry memory contract (`otel_memory:alloc(ptr, size,
//! weighted_bytes)`, `otel_memory:free(ptr)`): each allocation's block kept by its process
//! and pointer with its allocation's site (command and stack, as frame keys, which outlive
//! the window whose book interned them) until its free, so that each window ends with the
//! blocks still in use by site, carried across windows. A free of a block never seen
//! (allocated before the agent started, or past the bound) is counted and ignored; past
//! `MAX_BLOCKS` live blocks new allocations are counted in `alloc_*` but not tracked.

use rustc_hash::FxHashMap;

use super::live::LiveEvent;
use super::weigh::{is_otel_memory_alloc, is_otel_memory_free};
use super::{Aggregate, FrameKey};
use crate::perfdata::tracing_data::FieldFormat;
use crate::stacks::StackId;

/// The most blocks tracked at once.
pub const MAX_BLOCKS: usize = 1 << 20;

/// What the in-use table holds and has let go of, since the agent started.
#[derive(Debug, Clone, Copy, Default)]
pub struct InUseStats {
    /// Blocks allocated and not freed.
    pub live: u64,
    /// Frees of blocks the table does not hold.
    pub unknown_frees: u64,
    /// Allocations not tracked: the table was full.
    pub untracked: u64,
}

/// A site: the command prefix and the stack (root first) of an allocation.
type SiteKey = (String, Vec<FrameKey>);

#[derive(Debug)]
struct Site {
    key: SiteKey,
    objects: u64,
    bytes: u64,
}

/// Where a site of the allocation probe has its arguments.
#[derive(Debug)]
struct AllocSite {
    ptr: FieldFormat,
    weighted: FieldFormat,
}

/// The in-use table of a live run whose events hold the contract's two probes.
#[derive(Debug)]
pub struct InUse {
    /// Each site of the allocation probe (a program may fire it from several places, each
    /// an event of its own, its arguments where its compiler put them), by event.
    allocs: FxHashMap<usize, AllocSite>,
    /// Each site of the free probe, by event: where its pointer is.
    frees: FxHashMap<usize, FieldFormat>,
    /// The column the blocks in use are added to: the free probe's first site's event.
    free: usize,
    /// (pid, ptr) → (site, weighted bytes).
    blocks: FxHashMap<(u32, u64), (u32, u64)>,
    per_pid: FxHashMap<u32, u64>,
    sites: Vec<Site>,
    site_of: FxHashMap<SiteKey, u32>,
    /// This window's (prefix, stack) → site: a site's key is built once a window.
    memo: FxHashMap<(u32, Option<StackId>), u32>,
    pub stats: InUseStats,
}

impl InUse {
    /// The table, when the events hold both probes with their arguments at every site
    /// (placed through tracefs: the uprobe PMU fetches none).
    pub fn of(events: &[LiveEvent]) -> Option<InUse> {
        // Every site of a probe: the events whose column is the probe's first site's.
        let sites = |is: fn(&str) -> bool| -> Vec<usize> {
            (0..events.len())
                .filter(|&i| events.get(events[i].column).is_some_and(|c| is(&c.name)))
                .collect()
        };
        let (alloc_sites, free_sites) = (sites(is_otel_memory_alloc), sites(is_otel_memory_free));
        let free = events[*free_sites.first()?].column;
        alloc_sites.first()?;
        let field = |ev: usize, name: &str| events[ev].format.as_ref()?.field(name).cloned();
        let mut allocs = FxHashMap::default();
        for ev in alloc_sites {
            let site = AllocSite {
                ptr: field(ev, "arg1")?,
                weighted: field(ev, "arg3")?,
            };
            allocs.insert(ev, site);
        }
        let mut frees = FxHashMap::default();
        for ev in free_sites {
            frees.insert(ev, field(ev, "arg1")?);
        }
        Some(InUse {
            allocs,
            frees,
            free,
            blocks: FxHashMap::default(),
            per_pid: FxHashMap::default(),
            sites: Vec::new(),
            site_of: FxHashMap::default(),
            memo: FxHashMap::default(),
            stats: InUseStats::default(),
        })
    }

    /// Whether `ev` is a site of the allocation probe.
    pub fn is_alloc(&self, ev: usize) -> bool {
        self.allocs.contains_key(&ev)
    }

    /// Whether `ev` is a site of the free probe: its samples are only paired, and the
    /// probe's column carries the blocks in use.
    pub fn is_free(&self, ev: usize) -> bool {
        self.frees.contains_key(&ev)
    }

    /// An allocation at site `ev`, counted at `key` (prefix, stack) of `agg`.
    pub fn allocated(
        &mut self,
        ev: usize,
        pid: u32,
        raw: &[u8],
        key: (u32, Option<StackId>),
        agg: &Aggregate,
    ) {
        let Some(site) = self.allocs.get(&ev) else {
            return;
        };
        let (Some(ptr), Some(bytes)) = (site.ptr.read(raw), site.weighted.read(raw)) else {
            return;
        };
        if ptr == 0 {
            return;
        }
        // A block seen again was freed where no probe saw it: the newer allocation holds it.
        self.release(pid, ptr);
        if self.blocks.len() >= MAX_BLOCKS {
            self.stats.untracked += 1;
            return;
        }
        let site = self.site(key, agg);
        let s = &mut self.sites[site as usize];
        s.objects += 1;
        s.bytes += bytes;
        self.blocks.insert((pid, ptr), (site, bytes));
        *self.per_pid.entry(pid).or_insert(0) += 1;
    }

    /// A free at site `ev`: its block leaves the table, or, never seen, is counted.
    pub fn freed(&mut self, ev: usize, pid: u32, raw: &[u8]) {
        match self.frees.get(&ev).and_then(|f| f.read(raw)) {
            Some(0) | None => {}
            Some(ptr) => {
                if !self.release(pid, ptr) {
                    self.stats.unknown_frees += 1;
                }
            }
        }
    }

    /// A process is gone: its blocks are no longer in use.
    pub fn exited(&mut self, pid: u32) {
        if self.per_pid.remove(&pid).is_none() {
            return;
        }
        let sites = &mut self.sites;
        self.blocks.retain(|&(p, _), &mut (site, bytes)| {
            if p != pid {
                return true;
            }
            let s = &mut sites[site as usize];
            s.objects -= 1;
            s.bytes -= bytes;
            false
        });
    }

    /// Lets go of the blocks of the processes `gone` says are: those whose EXIT record was
    /// lost (a full ring), which the session dropped once `/proc` showed them gone
    /// (`session::reap`) without a word to its handler. How many processes went.
    pub fn forget_gone(&mut self, gone: impl Fn(u32) -> bool) -> usize {
        let pids: Vec<u32> = self.per_pid.keys().copied().filter(|&p| gone(p)).collect();
        for &pid in &pids {
            self.exited(pid);
        }
        pids.len()
    }

    /// The modules its sites' frames name (they outlive the window that interned them).
    pub fn modules(&self) -> Vec<u32> {
        self.sites
            .iter()
            .flat_map(|s| &s.key.1)
            .filter_map(|k| match k {
                FrameKey::User { module, .. } => Some(*module),
                _ => None,
            })
            .collect()
    }

    fn release(&mut self, pid: u32, ptr: u64) -> bool {
        let Some((site, bytes)) = self.blocks.remove(&(pid, ptr)) else {
            return false;
        };
        let s = &mut self.sites[site as usize];
        s.objects -= 1;
        s.bytes -= bytes;
        if let Some(n) = self.per_pid.get_mut(&pid) {
            *n -= 1;
            if *n == 0 {
                self.per_pid.remove(&pid);
            }
        }
        true
    }

    fn site(&mut self, key: (u32, Option<StackId>), agg: &Aggregate) -> u32 {
        if let Some(&s) = self.memo.get(&key) {
            return s;
        }
        let prefix = agg.prefixes.get(key.0).cloned().unwrap_or_default();
        let mut ids = Vec::new();
        if let Some(stack) = key.1 {
            agg.book.stacks.frames(stack, &mut ids);
        }
        let frames = ids
            .iter()
            .filter_map(|&f| agg.book.frames.get(f).cloned())
            .collect();
        let site_key = (prefix, frames);
        let s = match self.site_of.get(&site_key) {
            Some(&s) => s,
            None => {
                let s = self.sites.len() as u32;
                self.site_of.insert(site_key.clone(), s);
                self.sites.push(Site {
                    key: site_key,
                    objects: 0,
                    bytes: 0,
                });
                s
            }
        };
        self.memo.insert(key, s);
        s
    }

    /// At a window's end: its blocks in use, by site, into the free event's columns of
    /// `agg` (interning their commands and stacks there), and the sites no block holds let
    /// go of.
    pub fn add_to(&mut self, agg: &mut Aggregate) {
        self.memo.clear();
        for s in self.sites.iter().filter(|s| s.objects > 0) {
            let prefix = agg.prefixes.intern(&s.key.0);
            let ids: Vec<_> = s.key.1.iter().map(|k| agg.book.frames.intern(k)).collect();
            if s.key.1.iter().any(|k| matches!(k, FrameKey::Kernel { .. })) {
                agg.book.kernel_frames = true;
            }
            let stack = agg.book.stacks.intern(ids);
            let key = (self.free, prefix, stack);
            *agg.counts.entry(key).or_insert(0) += s.objects;
            *agg.bytes.entry(key).or_insert(0) += s.bytes;
        }
        self.stats.live = self.blocks.len() as u64;
        self.compact();
    }

    /// Drops the sites no block holds, renumbering the others.
    fn compact(&mut self) {
        let mut new_id = vec![u32::MAX; self.sites.len()];
        let mut kept = Vec::new();
        for (i, s) in std::mem::take(&mut self.sites).into_iter().enumerate() {
            if s.objects > 0 {
                new_id[i] = kept.len() as u32;
                kept.push(s);
            }
        }
        self.sites = kept;
        self.site_of = self
            .sites
            .iter()
            .enumerate()
            .map(|(i, s)| (s.key.clone(), i as u32))
            .collect();
        for (site, _) in self.blocks.values_mut() {
            *site = new_id[*site as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{InUse, InUseStats};
    use crate::aggregate::{Aggregate, FrameKey};
    use crate::config::report::StackSpace;
    use crate::perfdata::tracing_data::{EventFormat, FieldFormat};
    use crate::stacks::CodeAddr;

    fn field(name: &str, offset: usize) -> FieldFormat {
        FieldFormat {
            name: name.into(),
            offset,
            size: 8,
            signed: false,
            array_len: None,
        }
    }

    /// A table whose alloc is event 0 (arg1 at 0, arg3 at 16) and free event 1 (arg1 at 0).
    fn table() -> InUse {
        let site = super::AllocSite {
            ptr: field("arg1", 0),
            weighted: field("arg3", 16),
        };
        InUse {
            allocs: [(0, site)].into_iter().collect(),
            frees: [(1, field("arg1", 0))].into_iter().collect(),
            free: 1,
            blocks: Default::default(),
            per_pid: Default::default(),
            sites: Vec::new(),
            site_of: Default::default(),
            memo: Default::default(),
            stats: InUseStats::default(),
        }
    }

    fn raw(args: &[u64]) -> Vec<u8> {
        args.iter().flat_map(|a| a.to_ne_bytes()).collect()
    }

    /// A window with one stack (main → f) of command `app-7`: its (prefix, stack).
    fn window(f: u64) -> (Aggregate, (u32, Option<u32>)) {
        let mut agg = Aggregate::new(2, StackSpace::All);
        let prefix = agg.prefixes.intern(&"app-7".to_string());
        let ids: Vec<_> = [1, f]
            .map(|a| FrameKey::User {
                module: 0,
                offset: CodeAddr::new(a, false),
            })
            .iter()
            .map(|k| agg.book.frames.intern(k))
            .collect();
        let stack = agg.book.stacks.intern(ids);
        (agg, (prefix, stack))
    }

    /// (objects, bytes) in use of the free event's columns of `agg`.
    fn in_use(agg: &Aggregate) -> (u64, u64) {
        let objects = agg.counts.iter().filter(|(k, _)| k.0 == 1).map(|(_, n)| n);
        let bytes = agg.bytes.iter().filter(|(k, _)| k.0 == 1).map(|(_, n)| n);
        (objects.sum(), bytes.sum())
    }

    #[test]
    fn blocks_in_use_are_carried_across_windows_until_freed() {
        let mut t = table();
        let (agg, key) = window(2);
        t.allocated(0, 7, &raw(&[0x1000, 24, 96]), key, &agg);
        t.allocated(0, 7, &raw(&[0x2000, 24, 96]), key, &agg);
        t.allocated(0, 8, &raw(&[0x1000, 8, 8]), key, &agg);
        t.freed(1, 7, &raw(&[0x2000]));
        // A block allocated before the agent started.
        t.freed(1, 7, &raw(&[0x9000]));
        let mut agg = agg;
        t.add_to(&mut agg);
        assert_eq!(in_use(&agg), (2, 104));
        // The next window's book is another: the blocks keep their stack by its frames.
        let (mut next, _) = window(3);
        t.add_to(&mut next);
        assert_eq!(in_use(&next), (2, 104));
        let mut frames = Vec::new();
        let key = next.counts.keys().find(|k| k.0 == 1).unwrap();
        next.book.stacks.frames(key.2.unwrap(), &mut frames);
        assert_eq!(frames.len(), 2);
        // Process 8 exits, 7 frees its last block.
        t.exited(8);
        t.freed(1, 7, &raw(&[0x1000]));
        let (mut last, _) = window(2);
        t.add_to(&mut last);
        assert_eq!(in_use(&last), (0, 0));
        assert_eq!((t.stats.unknown_frees, t.stats.live), (1, 0));
        assert!(t.sites.is_empty(), "the sites no block holds are let go of");
    }

    #[test]
    fn past_the_bound_allocations_are_counted_not_tracked() {
        let mut t = table();
        let (agg, key) = window(2);
        for ptr in 1..=super::MAX_BLOCKS as u64 + 3 {
            t.allocated(0, 1, &raw(&[ptr * 16, 1, 1]), key, &agg);
        }
        assert_eq!(t.stats.untracked, 3);
        assert_eq!(t.blocks.len(), super::MAX_BLOCKS);
    }

    /// A process whose EXIT record was lost: its blocks go once it is known gone, not when
    /// the table is full (today's main kept them, up to a million blocks); the modules
    /// its sites name are held until then.
    #[test]
    fn blocks_of_processes_gone_without_an_exit_record_are_let_go_of() {
        let mut t = table();
        let (agg, key) = window(2);
        t.allocated(0, 7, &raw(&[0x1000, 24, 96]), key, &agg);
        t.allocated(0, 8, &raw(&[0x1000, 8, 8]), key, &agg);
        assert_eq!(t.modules(), [0, 0]);
        assert_eq!(t.forget_gone(|pid| pid == 8), 1);
        let mut agg = agg;
        t.add_to(&mut agg);
        assert_eq!(in_use(&agg), (1, 96));
        assert_eq!(t.forget_gone(|_| true), 1);
        t.add_to(&mut agg);
        assert!(t.modules().is_empty());
    }

    #[test]
    fn without_both_probes_and_their_arguments_there_is_no_table() {
        let ev = |name: &str, format: Option<EventFormat>| super::LiveEvent {
            name: name.into(),
            format,
            period: None,
            column: if name.ends_with("free") { 1 } else { 0 },
        };
        let alloc_only = [ev("sdt:/a:otel_memory:alloc", None)];
        assert!(InUse::of(&alloc_only).is_none());
        let no_args = [
            ev("sdt:/a:otel_memory:alloc", None),
            ev("sdt:/a:otel_memory:free", None),
        ];
        assert!(InUse::of(&no_args).is_none());
    }

    #[test]
    fn every_site_of_each_probe_is_paired_with_its_own_arguments() {
        // Sites: alloc 0 and 2 (its arg1 at 8, arg3 at 24), free 1 and 3 (arg1 at 8).
        let mut t = table();
        let second = super::AllocSite {
            ptr: field("arg1", 8),
            weighted: field("arg3", 24),
        };
        t.allocs.insert(2, second);
        t.frees.insert(3, field("arg1", 8));
        assert!(t.is_alloc(2) && t.is_free(3) && !t.is_alloc(3));
        let (agg, key) = window(2);
        t.allocated(0, 7, &raw(&[0x1000, 24, 96]), key, &agg);
        t.allocated(2, 7, &raw(&[0, 0x2000, 8, 4000]), key, &agg);
        t.allocated(2, 7, &raw(&[0, 0x3000, 8, 4000]), key, &agg);
        // Each freed at the other probe's site.
        t.freed(3, 7, &raw(&[0, 0x1000]));
        t.freed(1, 7, &raw(&[0x2000]));
        let mut agg = agg;
        t.add_to(&mut agg);
        assert_eq!(in_use(&agg), (1, 4000));
        assert_eq!(t.stats.unknown_frees, 0);
    }
}
