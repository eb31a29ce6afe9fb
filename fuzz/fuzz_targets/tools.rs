//! Any bytes read by a memory tool's `-i`: the input's first byte picks the command line
//! (the tool and its options), the rest is the recording. Errors, never a panic or a hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Each tool that reads its `-w` recordings, with the options that change how it reads
/// them (intervals, stacks, timestamps). `scripts/fuzz-seeds.sh` prefixes each tool's
/// recording with the index of its first line here.
pub const COMMANDS: &[&[&str]] = &[
    &["faults", "-i", "{}"],
    &["faults", "-i", "{}", "--folded", "--per-pid"],
    &["brkstack", "-i", "{}"],
    &["ffaults", "-i", "{}"],
    &["fmapfault", "-i", "{}"],
    &["hfaults", "-i", "{}"],
    &["swapin", "-i", "{}"],
    &["swapin", "0.01", "-i", "{}"],
    &["drsnoop", "-T", "--stack", "-i", "{}"],
    &["vmscan", "-i", "{}"],
    &["vmscan", "0.01", "-i", "{}"],
    &["slabratetop", "-i", "{}"],
    &["slabratetop", "0.01", "--noclear", "-i", "{}"],
    &["mmapsnoop", "-T", "--stack", "-i", "{}"],
    &["shmsnoop", "-T", "--stack", "-i", "{}"],
    &["oomkill", "-i", "{}"],
    &["rss", "-i", "{}"],
    &["rss", "-i", "{}", "--folded", "--touchers"],
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, recording)) = data.split_first() else {
        return;
    };
    let args = COMMANDS[pick as usize % COMMANDS.len()];
    let path = memperf_fuzz::write_input(recording);
    memperf_fuzz::run(args, &path);
});
