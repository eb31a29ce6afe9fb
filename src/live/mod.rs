//! Live recording: open the events, start the target, drain the rings in time order into the
//! session, synthesize the processes that existed before, stop, and count what was lost.
//! `record` and `leak` run on it with their own handlers.

pub mod drain;
pub mod driver;
pub mod keep;
pub mod open;
pub(crate) mod priority;
pub mod probes;
pub mod recorder;
pub mod remap;
pub mod resize;
pub mod synth;
pub mod writer;
