//! The live allocations of a traced process or of the kernel, and what owns an address.
//!
//! `plan` says what a run opens (the allocator's uprobes or the kmem tracepoints, and with
//! `--faults` the page-fault event), `run` drives it live, `sink` is its handler (the
//! allocator calls matched per thread into `table`, the outstanding-allocation table, in
//! time order with every other sample), and `resident` joins fault addresses to the
//! allocations that hold them; `frames` memoises each process's
//! stack frames for the handler, and `unwinds` counts its stacks that were truncated. `replay` rebuilds the table from a recording's allocator
//! calls, for readers of a file (`mem report --by allocation`). `leak` and `rss` report on
//! it; neither imports the other.

pub(crate) mod frames;
pub(crate) mod heap;
pub(crate) mod hijacked;
pub(crate) mod kernel;
pub(crate) mod plan;
pub(crate) mod profile;
pub(crate) mod replay;
pub(crate) mod resident;
pub(crate) mod run;
pub(crate) mod sink;
pub(crate) mod table;
pub(crate) mod unwinds;
