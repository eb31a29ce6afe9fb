//! What the fuzz targets share: the input written to a file, then read by a memperf command
//! line exactly as the binary runs it (`cmd::run`), with standard output sent to /dev/null.

use std::path::PathBuf;
use std::sync::Once;

use memperf::cli::Cli;

/// The file each input is written to: one per fuzzing process, on tmpfs.
pub fn input_path() -> PathBuf {
    PathBuf::from(format!("/dev/shm/memperf-fuzz-{}.data", std::process::id()))
}

/// Writes `data` to [`input_path`] for the commands to read.
pub fn write_input(data: &[u8]) -> PathBuf {
    let path = input_path();
    std::fs::write(&path, data).expect("write the fuzz input");
    path
}

/// Runs `memperf ARGS...` as the binary does; errors are expected, a panic is a bug.
/// `{}` in an argument stands for the input's path.
pub fn run(args: &[&str], path: &std::path::Path) {
    discard_stdout();
    let p = path.to_str().expect("a UTF-8 temp path");
    let argv =
        std::iter::once("memperf".to_string()).chain(args.iter().map(|a| a.replace("{}", p)));
    let cli = Cli::try_parse_args(argv).expect("the target's own command lines parse");
    let _ = memperf::cmd::run(cli.command);
}

/// Sends standard output to /dev/null: the commands print what they read there, and the
/// fuzzer's own messages go to standard error.
fn discard_stdout() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use std::os::fd::AsRawFd;
        let null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .expect("open /dev/null");
        // SAFETY: dup2 onto fd 1 replaces standard output; nothing else holds it open.
        let rc = unsafe { libc::dup2(null.as_raw_fd(), 1) };
        assert!(rc == 1, "dup2 onto standard output");
    });
}
