//! One module per subcommand.

pub mod leak;
pub mod oomkill;
pub mod record;
pub mod report;
