//! memperf: a memory profiler for Linux built on perf_event_open, without BPF.
//!
//! The pipeline is split by stage: `events` parses event specs, `sys` talks to
//! the kernel (the only place with `unsafe`), `record` parses records, `session`
//! consumes them (process tracking, unwinding), `perfdata` writes and reads
//! perf.data files, and `cmd` holds one module per subcommand.
#![deny(unsafe_code)]

pub mod abi;
pub mod aggregate;
pub mod buildid;
pub mod cli;
pub mod cmd;
pub mod events;
pub mod input;
pub mod live;
pub mod man;
pub mod mapped;
pub mod maps;
pub mod output;
pub mod perfdata;
pub mod printfmt;
pub mod procfs;
pub mod records;
pub mod session;
pub mod stacks;
pub mod symbolize;
#[allow(unsafe_code)]
pub mod sys;
pub mod tool;
pub mod unwind;
