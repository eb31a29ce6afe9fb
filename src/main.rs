//! The `memperf` binary: parse the command line, run the subcommand, report errors.

use std::io::ErrorKind;
use std::process::ExitCode;

use memperf::cli::Cli;

fn main() -> ExitCode {
    memperf::sys::tune_allocator();
    let cli = Cli::parse_args();
    let result = memperf::cmd::run(cli.command);
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            // A closed stdout (`| head`) is not an error worth a message.
            if e.chain()
                .filter_map(|c| c.downcast_ref::<std::io::Error>())
                .any(|io| io.kind() == ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("memperf: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
