//! One module per subcommand.

pub mod brkstack;
pub mod drsnoop;
pub mod faults;
pub mod ffaults;
pub mod leak;
pub mod mmapsnoop;
pub mod oomkill;
pub mod record;
pub mod report;
pub mod shmsnoop;
pub mod slabratetop;
pub mod swapin;
pub mod triage;
pub mod vmscan;
