//! The `memperf` binary: parse the command line, run the subcommand, report errors.

use std::io::ErrorKind;
use std::process::ExitCode;

use memperf::cli::mem::MemAction;
use memperf::cli::{Cli, Command};

fn main() -> ExitCode {
    memperf::sys::tune_allocator();
    let cli = Cli::parse_args();
    let result = match cli.command {
        Command::Record(args) => args.into_config().and_then(memperf::cmd::record::run),
        Command::Report(args) => args.into_config().and_then(memperf::cmd::report::run),
        Command::Script(args) => args.into_config().and_then(memperf::cmd::report::run),
        Command::Diff(args) => args.into_config().and_then(memperf::cmd::diff::run),
        Command::Stat(args) => args.into_config().and_then(memperf::cmd::stat::run),
        Command::Leak(args) => args.into_config().and_then(memperf::cmd::leak::run),
        Command::Rss(args) => args.into_config().and_then(memperf::cmd::rss::run),
        Command::Heap(args) => args.into_config().and_then(memperf::cmd::heap::run),
        Command::Faults(args) => memperf::cmd::faults::run(args),
        Command::Brkstack(args) => memperf::cmd::brkstack::run(args),
        Command::Ffaults(args) => {
            memperf::cmd::ffaults::run(memperf::cmd::ffaults::Place::Files, args)
        }
        Command::Fmapfault(args) => {
            memperf::cmd::ffaults::run(memperf::cmd::ffaults::Place::CommFiles, args)
        }
        Command::Hfaults(args) => {
            memperf::cmd::ffaults::run(memperf::cmd::ffaults::Place::Huge, args)
        }
        Command::Swapin(args) => memperf::cmd::swapin::run(args),
        Command::Drsnoop(args) => memperf::cmd::drsnoop::run(args),
        Command::Vmscan(args) => memperf::cmd::vmscan::run(args),
        Command::Slabratetop(args) => memperf::cmd::slabratetop::run(args),
        Command::Mmapsnoop(args) => memperf::cmd::mmapsnoop::run(args),
        Command::Shmsnoop(args) => memperf::cmd::shmsnoop::run(args),
        Command::Oomkill(args) => memperf::cmd::oomkill::run(args),
        Command::List(args) => args.into_config().and_then(memperf::cmd::list::run),
        Command::Triage(args) => args.into_config().and_then(memperf::cmd::triage::run),
        Command::Mem(args) => match args.action {
            MemAction::Record(a) => a.into_config().and_then(memperf::cmd::mem::record),
            MemAction::Report(a) => a.into_config().and_then(memperf::cmd::mem::report),
        },
    };
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
