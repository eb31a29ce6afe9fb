//! Any bytes read as `record`'s file by `report` (its text, `--folded`, `--by mapping` and
//! `--pprof` outputs), `script` and `mem report`: errors, never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

const COMMANDS: &[&[&str]] = &[
    &["report", "-q", "-i", "{}"],
    &["report", "-q", "-i", "{}", "--folded"],
    &["report", "-q", "-i", "{}", "--by", "mapping"],
    &["report", "-q", "-i", "{}", "--pprof", "/dev/null"],
    &["script", "-q", "-i", "{}"],
    &["mem", "report", "-i", "{}"],
];

fuzz_target!(|data: &[u8]| {
    let path = memperf_fuzz::write_input(data);
    for args in COMMANDS {
        memperf_fuzz::run(args, &path);
    }
});
