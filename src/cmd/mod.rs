//! One module per subcommand.

pub mod record;
