//! perf.data
