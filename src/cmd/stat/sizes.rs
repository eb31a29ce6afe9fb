//! The memory tracepoints whose payload has a size, and how many bytes each hit stands for.

use rustc_hash::FxHashMap;

use crate::perfdata::tracing_data::{EventFormat, FieldFormat};

/// How one tracepoint hit's bytes are read from its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeRule {
    /// A field in bytes.
    Field(&'static str),
    /// A page order: `PAGE_SIZE << order`.
    Order(&'static str),
    /// brk(): the break's growth, from `sys_exit_brk`'s return value and the process's
    /// break before.
    BrkGrowth,
    /// brk()'s argument, from `sys_enter_brk` (a query, `brk(0)`, moves nothing).
    BrkArg,
}

/// A sized tracepoint: its rule and the label its bytes are printed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sized {
    pub rule: SizeRule,
    pub label: &'static str,
}

/// The size of `system:name`'s hits, if memperf knows one.
pub fn sized(system: &str, name: &str) -> Option<Sized> {
    use SizeRule::*;
    let (rule, label) = match (system, name) {
        ("syscalls", "sys_enter_mmap" | "sys_enter_munmap") => (Field("len"), "len"),
        ("syscalls", "sys_enter_mremap") => (Field("new_len"), "new_len"),
        ("syscalls", "sys_enter_shmget") => (Field("size"), "size"),
        ("syscalls", "sys_enter_madvise") => (Field("len_in"), "len"),
        ("syscalls", "sys_enter_brk") => (BrkGrowth, "grown"),
        ("kmem", "kmalloc" | "kmalloc_node" | "kmem_cache_alloc" | "kmem_cache_alloc_node") => {
            (Field("bytes_alloc"), "bytes_alloc")
        }
        ("kmem", "mm_page_alloc" | "mm_page_alloc_zone_locked") => (Order("order"), "allocated"),
        ("kmem", "mm_page_free") => (Order("order"), "freed"),
        ("percpu", "percpu_alloc_percpu") => (Field("bytes_alloc"), "bytes_alloc"),
        _ => return None,
    };
    Some(Sized { rule, label })
}

/// Reads one hit's bytes (`BrkGrowth` is not read here: see `Breaks`).
#[derive(Debug, Clone)]
pub struct Reader {
    field: FieldFormat,
    order: bool,
}

impl Reader {
    /// The reader of `rule` over the tracepoint's format; `None` when this kernel's format
    /// lacks the field (the event is then only counted).
    pub fn new(rule: SizeRule, format: &EventFormat) -> Option<Reader> {
        let (name, order) = match rule {
            SizeRule::Field(f) => (f, false),
            SizeRule::Order(f) => (f, true),
            SizeRule::BrkGrowth => ("ret", false),
            SizeRule::BrkArg => ("brk", false),
        };
        Some(Reader {
            field: format.field(name)?.clone(),
            order,
        })
    }

    /// The bytes of a hit whose payload is `raw`.
    pub fn bytes(&self, raw: &[u8]) -> Option<u64> {
        let v = self.field.read(raw)?;
        if self.order {
            // An order of -1 (a failed allocation) reads as a large unsigned value.
            (v < 64).then(|| (crate::sys::page_size() as u64) << v)
        } else {
            Some(v)
        }
    }

    /// The raw field value (brk's new break).
    pub fn value(&self, raw: &[u8]) -> Option<u64> {
        self.field.read(raw)
    }
}

/// Each process's break, to turn brk()'s returns into growth.
#[derive(Debug, Default)]
pub struct Breaks {
    last: FxHashMap<u32, u64>,
    /// Threads inside brk(), and whether theirs is a query (`brk(0)`).
    pending: FxHashMap<u32, bool>,
}

impl Breaks {
    /// A thread entered brk() asking for `arg`.
    pub fn enter(&mut self, tid: u32, arg: u64) {
        self.pending.insert(tid, arg == 0);
    }

    /// The growth of `pid`'s heap by a brk() of thread `tid` that returned `new`: nothing
    /// for a query (`brk(0)`, how a program finds its break after exec, where the break
    /// moved to a new random place), for the first call seen of a process, or for a shrink.
    pub fn exit(&mut self, pid: u32, tid: u32, new: u64) -> u64 {
        let query = self.pending.remove(&tid).unwrap_or(false);
        match self.last.insert(pid, new) {
            Some(old) if new > old && !query => new - old,
            _ => 0,
        }
    }

    /// Forgets every process `alive` says is gone: a system-wide run has no EXIT records,
    /// and the table must not grow with every process that ever ran.
    pub fn prune(&mut self, alive: impl Fn(u32) -> bool) {
        self.last.retain(|&pid, _| alive(pid));
        self.pending.retain(|&tid, _| alive(tid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_tracepoints_have_sizes() {
        assert_eq!(
            sized("syscalls", "sys_enter_mmap"),
            Some(Sized {
                rule: SizeRule::Field("len"),
                label: "len"
            })
        );
        assert_eq!(
            sized("kmem", "kmalloc").map(|s| s.rule),
            Some(SizeRule::Field("bytes_alloc"))
        );
        assert_eq!(
            sized("kmem", "mm_page_alloc").map(|s| s.rule),
            Some(SizeRule::Order("order"))
        );
        assert_eq!(sized("kmem", "kfree"), None);
        assert_eq!(sized("sched", "sched_switch"), None);
    }

    #[test]
    fn breaks_count_growth_from_the_first_seen() {
        let mut b = Breaks::default();
        let call = |b: &mut Breaks, pid, arg, ret| {
            b.enter(pid, arg);
            b.exit(pid, pid, ret)
        };
        assert_eq!(call(&mut b, 7, 0, 0x1000), 0);
        assert_eq!(call(&mut b, 7, 0x3000, 0x3000), 0x2000);
        assert_eq!(call(&mut b, 7, 0x2000, 0x2000), 0, "a shrink grows nothing");
        assert_eq!(call(&mut b, 7, 0x2800, 0x2800), 0x800);
        // A failed brk returns the old break.
        assert_eq!(call(&mut b, 7, 1 << 40, 0x2800), 0);
        assert_eq!(
            call(&mut b, 8, 0x9000, 0x9000),
            0,
            "another process starts apart"
        );
        // exec: the break moves to a new random place, found with brk(0).
        assert_eq!(call(&mut b, 7, 0, 0x7000_0000_0000), 0);
        assert_eq!(
            call(&mut b, 7, 0x7000_0002_1000, 0x7000_0002_1000),
            0x2_1000
        );
        b.prune(|pid| pid != 7);
        assert_eq!(
            call(&mut b, 7, 0x5000, 0x5000),
            0,
            "a recycled pid starts again"
        );
        // An exit whose entry was not seen (the run started inside the call) still counts.
        assert_eq!(b.exit(8, 8, 0xa000), 0x1000);
    }
}
