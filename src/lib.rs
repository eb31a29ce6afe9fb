//! memperf: a memory profiler for Linux built on perf_event_open, without BPF.
#![deny(unsafe_code)]

pub mod buildid;
pub mod events;
pub mod perfdata;
pub mod procfs;
pub mod record;
pub mod symbolize;
#[allow(unsafe_code)]
pub mod sys;
pub mod unwind;
