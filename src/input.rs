//! Opening the recording `-i` names: a perf.data file in either mode, or standard input.

use std::io::IsTerminal;

use anyhow::{Result, bail};

use crate::config::report::Input;
use crate::perfdata::{PerfDataError, PerfDataFile, StreamError};

/// The recording `input` names, read whole: a file (mapped when it is a regular file), or
/// standard input.
pub fn open(input: &Input) -> Result<PerfDataFile> {
    let path = match input {
        Input::File(path) => path,
        Input::Stdin => return read_stdin(),
    };
    if path.is_dir() {
        bail!("`{}` is a directory, not a perf.data file", path.display());
    }
    PerfDataFile::open(path).map_err(|e| match e {
        PerfDataError::Io { .. } | PerfDataError::NotAFile { .. } => anyhow::Error::new(e),
        other => anyhow::anyhow!("`{}`: {other}", path.display()),
    })
}

/// `-i -`: the whole recording, read into memory (the reader works on one slice), in either
/// mode: usually perf's pipe mode, `perf record -o - ... | memperf report -i -`.
fn read_stdin() -> Result<PerfDataFile> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!(
            "standard input is a terminal, not a recording: pipe one in \
             (`perf record -o - -- CMD | memperf report -i -`) or name a file with -i"
        );
    }
    PerfDataFile::read_stream(&mut stdin.lock()).map_err(|e| match e {
        StreamError::Io(e) => {
            anyhow::Error::new(e).context("failed to read the recording from standard input")
        }
        StreamError::Data(e) => anyhow::anyhow!("standard input: {e}"),
    })
}
