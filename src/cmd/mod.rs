//! One module per subcommand.

pub mod leak;
pub mod record;
pub mod report;
