//! The typed configurations the stages are given: what `cli` validates the command line
//! into. The stages own these types and import them from here, never from `cli`, so the
//! argument layer (clap) stays at the top of the pipeline; `cli` depends on `config`,
//! not the other way round.

pub mod agent;
pub mod diff;
pub mod heap;
pub mod leak;
pub mod list;
pub mod mem;
pub mod record;
pub mod report;
pub mod rss;
pub mod slab;
pub mod stacks;
pub mod stat;
pub mod tool;
pub mod triage;
