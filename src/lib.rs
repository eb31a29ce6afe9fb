//! memperf: a memory profiler for Linux built on perf_event_open, without BPF.
//!
//! The pipeline is split by stage: `events` parses event specs, `sys` talks to
//! the kernel (the only place with `unsafe`), `record` parses records, `session`
//! consumes them (process tracking, unwinding), `perfdata` writes and reads
//! perf.data files, and `cmd` holds one module per subcommand.
#![deny(unsafe_code)]

pub(crate) mod abi;
pub(crate) mod aggregate;
pub(crate) mod allocators;
pub(crate) mod allocs;
pub mod buildid;
pub mod cli;
pub mod cmd;
pub mod config;
pub(crate) mod datasrc;
pub(crate) mod events;
pub(crate) mod input;
pub(crate) mod jitdump;
pub(crate) mod kmsg;
pub(crate) mod live;
pub mod man;
pub(crate) mod mapped;
pub(crate) mod maps;
pub(crate) mod output;
pub mod perfdata;
pub(crate) mod printfmt;
pub(crate) mod probes;
pub mod procfs;
pub mod records;
pub(crate) mod session;
pub(crate) mod ship;
pub(crate) mod stacks;
pub(crate) mod symbolize;
#[allow(unsafe_code)]
pub mod sys;
pub(crate) mod tool;
pub mod unwind;
