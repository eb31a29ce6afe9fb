//! Any bytes given to the perf.data reader and the record parser: errors, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memperf::perfdata::PerfDataFile;
use memperf::records::parse_record;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = PerfDataFile::from_bytes(data.to_vec()) else {
        return;
    };
    for rec in file.records() {
        let Ok(rec) = rec else { break };
        let ev = file.event_for(rec.ty, rec.body);
        let info = file.parse_info(ev.unwrap_or(0));
        let _ = parse_record(rec.ty, rec.misc, rec.body, &info);
    }
});
