//! One module per subcommand.

pub mod brkstack;
pub mod faults;
pub mod leak;
pub mod oomkill;
pub mod record;
pub mod report;
