//! What every output says about its recording besides the stacks: what was lost, throttled
//! or truncated, and when and where it was made. The text report, `--by`, `--timeline`, the
//! flame graph's subtitle and the pprof comments all take it from here.

use crate::config::report::Input;
use crate::perfdata::PerfDataFile;
use crate::unwind::TruncCounts;

use crate::aggregate::ReadStats;

/// User stacks unwound and truncated, while recording (memperf's feature section) and here.
pub struct Truncation {
    pub unwound: u64,
    pub truncated: u64,
    pub reasons: TruncCounts,
}

/// The truncation counts of the recorder and of this report together.
pub fn truncation(st: &ReadStats) -> Truncation {
    let r = &st.recorded_reasons;
    let o = &st.truncated_reasons;
    Truncation {
        unwound: st.unwound + st.recorded_unwound,
        truncated: st.truncated + st.recorded_truncated,
        reasons: TruncCounts {
            no_process: r.no_process + o.no_process,
            stack_end: r.stack_end + o.stack_end,
            no_unwind_info: r.no_unwind_info + o.no_unwind_info,
            bad_frame: r.bad_frame + o.bad_frame,
            max_depth: r.max_depth + o.max_depth,
        },
    }
}

/// The user stacks of some events unwound and truncated.
pub struct EventsTruncation {
    pub unwound: u64,
    pub truncated: u64,
    /// The recording counted its truncations for all events together: these are all
    /// events' counts, not only those asked for.
    pub all_events: bool,
}

/// The truncation counts of `events` alone, where the recording counted them per event
/// (memperf's recordings do since they say so per event; perf's are unwound here); else
/// of every event, marked so.
pub fn events_truncation(st: &ReadStats, events: &[usize]) -> EventsTruncation {
    match &st.event_unwinds {
        Some(per) => EventsTruncation {
            unwound: events
                .iter()
                .filter_map(|&e| per.get(e))
                .map(|u| u.unwound)
                .sum(),
            truncated: events
                .iter()
                .filter_map(|&e| per.get(e))
                .map(|u| u.truncated)
                .sum(),
            all_events: false,
        },
        None => {
            let t = truncation(st);
            EventsTruncation {
                unwound: t.unwound,
                truncated: t.truncated,
                all_events: st.samples.iter().filter(|&&n| n > 0).count() > 1,
            }
        }
    }
}

/// `lost 2 events in 1 LOST records, 0 lost samples, throttled 0 times; 3 of 300 user
/// stacks truncated (3 stack end)`, or `nothing lost; ...` when the kernel dropped and
/// throttled nothing: one line for every output's header.
pub fn losses(st: &ReadStats) -> String {
    let mut s = if st.lost + st.lost_records + st.lost_samples + st.throttled == 0 {
        "nothing lost".to_string()
    } else {
        format!(
            "lost {} events in {} LOST records, {} lost samples, throttled {} times",
            st.lost, st.lost_records, st.lost_samples, st.throttled
        )
    };
    let t = truncation(st);
    if t.unwound > 0 {
        s.push_str(&format!(
            "; {} of {} user stacks truncated",
            t.truncated, t.unwound
        ));
        if t.reasons.total() > 0 {
            s.push_str(&format!(" ({})", t.reasons));
        }
        if st.unwound_none > 0 {
            s.push_str(&format!(", {} of them not unwound at all", st.unwound_none));
        }
    }
    s.push_str(&fp_part(st));
    if st.foreign_skipped > 0 {
        s.push_str(&format!(
            "; {} samples skipped: they carried the sample id of another perf session's event \
             (the kernel gives events that fire together one sample's id)",
            st.foreign_skipped
        ));
    }
    if st.malformed > 0 {
        s.push_str(&format!("; {} records could not be parsed", st.malformed));
    }
    if st.late > 0 {
        s.push_str(&format!(
            "; {} records came after newer ones and were taken out of time order",
            st.late
        ));
    }
    if let Some(at) = st.unfinished_at {
        let samples: u64 = st.samples.iter().sum();
        s.push_str(&format!(
            "; the recording was not finished: read {samples} samples up to byte {at}"
        ));
    }
    if st.read_error.is_some() {
        s.push_str("; the data section ends early");
    }
    s
}

/// `; 3 of 300 user stacks truncated`, with those not unwound at all when there are: the
/// part of a subtitle that says what the stacks lost; empty when none was unwound.
pub fn truncated_part(st: &ReadStats) -> String {
    let t = truncation(st);
    if t.unwound == 0 {
        return fp_part(st);
    }
    let mut s = format!("; {} of {} user stacks truncated", t.truncated, t.unwound);
    if st.unwound_none > 0 {
        s.push_str(&format!(", {} of them not unwound at all", st.unwound_none));
    }
    s.push_str(&fp_part(st));
    s
}

/// `; 2 of 50 user stacks walked by frame pointers were cut ...`, when any was.
fn fp_part(st: &ReadStats) -> String {
    fp_clause(st.fp_cut, st.fp_walked).map_or_else(String::new, |c| format!("; {c}"))
}

/// `2 of 50 user stacks walked by frame pointers were cut where the walk read no return
/// address`, when any was (`cut` of `walked`): the headers' and the tools' closing line's.
pub fn fp_clause(cut: u64, walked: u64) -> Option<String> {
    (cut > 0).then(|| format!("{cut} of {walked} user stacks {FP_CUT}"))
}

/// What a frame-pointer cut is, after the stacks it names (`N of M ... stacks`).
pub const FP_CUT: &str = "walked by frame pointers were cut where the walk read no return address";

/// Folded stacks and `memperf script` have no header: what was lost or truncated goes to
/// standard error instead, in one line, when there is any.
pub fn note_losses(st: &ReadStats) {
    if lost_any(st) {
        eprintln!("memperf: note: {}", losses(st));
    }
}

/// Whether the recording lost, throttled, skipped or truncated anything: what
/// [`note_losses`] speaks of.
pub fn lost_any(st: &ReadStats) -> bool {
    let lost =
        st.lost + st.lost_samples + st.throttled + st.malformed + st.late + st.foreign_skipped;
    lost > 0 || truncation(st).truncated > 0 || st.fp_cut > 0 || st.unfinished_at.is_some()
}

/// Where the records ended early, for every output but the text report (its header says
/// it): on standard error, once.
pub fn warn_read_error(st: &ReadStats) {
    if let Some(e) = &st.read_error {
        eprintln!("memperf: warning: {e}; the report covers the records before it");
    }
}

/// `recorded 2026-11-22 23:21:36 UTC on HOST`: the file's modification time, which is when
/// the recorder finished it (perf report's "captured on" is the same), and the host. A
/// recording read from standard input has no such time.
pub fn recorded(input: &Input, file: &PerfDataFile) -> String {
    let when = match input {
        Input::File(path) => std::fs::metadata(path).and_then(|m| m.modified()).ok(),
        Input::Stdin => None,
    };
    let when = when
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| utc(d.as_secs()));
    let mut s = String::new();
    if let Some(w) = when {
        s.push_str(&format!("recorded {w}"));
    }
    if let Some(h) = &file.features.hostname {
        s.push_str(&format!("{}on {h}", if s.is_empty() { "" } else { " " }));
    }
    s
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (the proleptic Gregorian calendar,
/// by Howard Hinnant's days-to-civil algorithm).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_795_389_696), "2026-11-22 23:21:36 UTC");
    }

    #[test]
    fn a_recording_that_lost_nothing_says_so_not_zero_counts() {
        assert_eq!(losses(&ReadStats::default()), "nothing lost");
        let throttled = ReadStats {
            throttled: 1,
            ..ReadStats::default()
        };
        assert_eq!(
            losses(&throttled),
            "lost 0 events in 0 LOST records, 0 lost samples, throttled 1 times"
        );
    }

    #[test]
    fn losses_add_the_recorders_truncations_to_the_reports() {
        let st = ReadStats {
            lost: 2,
            lost_records: 1,
            recorded_unwound: 10,
            recorded_truncated: 3,
            recorded_reasons: TruncCounts {
                bad_frame: 3,
                ..TruncCounts::default()
            },
            unwound: 5,
            truncated: 1,
            truncated_reasons: TruncCounts {
                stack_end: 1,
                ..TruncCounts::default()
            },
            ..ReadStats::default()
        };
        assert_eq!(
            losses(&st),
            "lost 2 events in 1 LOST records, 0 lost samples, throttled 0 times; \
             4 of 15 user stacks truncated (1 stack end, 3 bad frame)"
        );
    }
}
