//! One module per subcommand.

pub mod record;
pub mod report;
