//! memperf: a memory profiler for Linux built on perf_event_open, without BPF.
#![deny(unsafe_code)]

pub mod symbolize;
