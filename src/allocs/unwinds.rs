//! What the allocation stacks lost: how many the unwind did not take to the program's root
//! (the stack copy ended first and the live process could not finish them, or unwind
//! information was missing), and how many it could not unwind at all. The session counts
//! truncated stacks per event (`session::Unwinds`), as `record` and `report` print them; the
//! allocation tools count those of their allocating entry probes (free's and munmap's
//! stacks are no allocation's) and say them in their summaries, interval reports and the
//! headers of their outputs. A truncated stack keeps the frames its copy held and no other:
//! its root is the outermost frame reached, never one it did not have.

use crate::aggregate::ReadStats;
use crate::session::Unwinds;

use super::sink::{LeakSink, Role};
use super::table::Func;

/// Allocation stacks unwound, truncated, and with no frame past the allocator's.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StackCounts {
    pub unwound: u64,
    pub truncated: u64,
    /// Of the truncated ones, those with no frame past the allocator's own: not unwound at
    /// all (`[no stack]` in the outputs).
    pub none: u64,
    /// Of those, the ones left out while the reader was behind (`session::shed`).
    pub shed: u64,
    /// Stacks the kernel walked by frame pointers (`--call-graph fp`), and those cut at a
    /// value that is no return address (`aggregate::FpCheck`).
    pub fp: u64,
    pub fp_cut: u64,
    /// The same of the fault stacks (rss's touchers).
    pub fault_fp: u64,
    pub fault_fp_cut: u64,
}

/// Whether an entry probe's stack is an allocation's.
pub(crate) fn allocates(role: &Role) -> bool {
    matches!(role, Role::Entry(f) if !matches!(f, Func::Free | Func::Munmap))
}

impl StackCounts {
    /// The allocation stacks among `per_event` (the session's counts, or a recording's), the
    /// events as `sink` has them; `sink` counted those left without a frame.
    pub fn of(sink: &LeakSink, per_event: &[Unwinds]) -> StackCounts {
        let mut c = StackCounts {
            none: sink.stackless,
            fp: sink.fp_stacks,
            fp_cut: sink.fp_cut,
            fault_fp: sink.fault_fp_stacks,
            fault_fp_cut: sink.fault_fp_cut,
            ..StackCounts::default()
        };
        for (e, u) in sink.events().iter().zip(per_event) {
            if e.stack && allocates(&e.role) {
                c.unwound += u.unwound;
                c.truncated += u.truncated;
                c.shed += u.shed;
            }
        }
        // A sample without registers is counted truncated, never unwound.
        c.unwound = c.unwound.max(c.truncated);
        // A frame-pointer stack cut at its first frame has no frame left either.
        c.none = c.none.min(c.truncated + c.fp_cut);
        c.shed = c.shed.min(c.none);
        c
    }

    /// `200 of 530 allocation stacks truncated (37.7%), 0 of them not unwound at all`.
    pub fn clause(&self) -> String {
        let mut s = format!(
            "{} of {} allocation stacks truncated ({:.1}%), {} of them not unwound at all",
            self.truncated,
            self.unwound,
            self.truncated as f64 * 100.0 / self.unwound.max(1) as f64,
            self.none
        );
        if self.shed > 0 {
            s.push_str(&format!(
                " ({} left out while memperf was behind, to lose no event)",
                self.shed
            ));
        }
        s
    }

    /// `3 of 530 allocation stacks walked by frame pointers were cut ...` (and of the
    /// fault stacks), when any was.
    pub fn fp_clause(&self) -> Option<String> {
        let parts: Vec<String> = [
            (self.fp_cut, self.fp, "allocation"),
            (self.fault_fp_cut, self.fault_fp, "fault"),
        ]
        .into_iter()
        .filter(|&(cut, _, _)| cut > 0)
        .map(|(cut, of, what)| format!("{cut} of {of} {what} stacks"))
        .collect();
        (!parts.is_empty())
            .then(|| format!("{} {}", parts.join(" and "), crate::output::header::FP_CUT))
    }

    /// The summary's sentence of the stacks the kernel walked by frame pointers, when any
    /// was cut.
    pub fn fp_sentence(&self) -> Option<String> {
        self.fp_clause().map(|c| {
            format!(
                "memperf: {c}: the kernel's walk went through code built without frame \
                 pointers and read values that are no return addresses, so the frames from \
                 there on were left out (--call-graph dwarf unwinds such code)"
            )
        })
    }

    /// The summary's sentence, when any stack was unwound.
    pub fn sentence(&self) -> Option<String> {
        if self.truncated == 0 {
            return (self.unwound > 0).then(|| {
                format!(
                    "memperf: {}: every one reached the program's root",
                    self.clause()
                )
            });
        }
        Some(format!(
            "memperf: {}: the unwind stopped before the program's root (the stack copy \
             ended and the live process could not finish it, or unwind information was \
             missing), so their outermost callers are missing (--call-graph \
             dwarf,BYTES sets how much of each stack is copied)",
            self.clause()
        ))
    }

    /// The line of a report made while tracing goes on: nothing when every stack is whole.
    pub fn report_line(&self) -> Option<String> {
        let parts: Vec<String> = [
            (self.truncated > 0).then(|| self.clause()),
            self.fp_clause(),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| format!("Stacks: {}", parts.join("; ")))
    }

    /// Puts the counts where every output's header finds them (`output::header`).
    pub fn add_to(&self, st: &mut ReadStats) {
        st.unwound = self.unwound;
        st.truncated = self.truncated;
        st.unwound_none = self.none;
        st.fp_walked = self.fp + self.fault_fp;
        st.fp_cut = self.fp_cut + self.fault_fp_cut;
    }
}

/// The stacks a recording's recorder unwound and truncated per event (its memperf
/// feature section), for a replay: its stacks were unwound while recording.
pub(crate) fn recorded(file: &crate::perfdata::PerfDataFile, events: usize) -> Vec<Unwinds> {
    let Some(m) = &file.features.memperf_stats else {
        return Vec::new();
    };
    (0..events).map(|ev| m.event_unwinds(ev).into()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clause_gives_both_counts() {
        let c = StackCounts {
            unwound: 530,
            truncated: 200,
            none: 3,
            shed: 0,
            fp: 0,
            fp_cut: 0,
            fault_fp: 0,
            fault_fp_cut: 0,
        };
        assert_eq!(
            c.clause(),
            "200 of 530 allocation stacks truncated (37.7%), 3 of them not unwound at all"
        );
        assert!(StackCounts::default().sentence().is_none());
        assert!(StackCounts::default().fp_sentence().is_none());
        assert!(StackCounts::default().report_line().is_none());
    }

    /// Frame-pointer stacks cut are said in the summary, the interval reports and the
    /// outputs' headers (as truncated stacks of that many).
    #[test]
    fn frame_pointer_stacks_cut_are_said_everywhere() {
        let c = StackCounts {
            fp: 501,
            fp_cut: 200,
            ..StackCounts::default()
        };
        assert!(c.sentence().is_none());
        assert!(c.fp_sentence().is_some_and(|s| s.starts_with(
            "memperf: 200 of 501 allocation stacks walked by frame pointers were cut"
        )));
        assert_eq!(
            c.report_line().as_deref(),
            Some(
                "Stacks: 200 of 501 allocation stacks walked by frame pointers were cut where \
                 the walk read no return address"
            )
        );
        let mut st = ReadStats::default();
        c.add_to(&mut st);
        assert_eq!((st.unwound, st.truncated), (0, 0));
        assert_eq!((st.fp_walked, st.fp_cut), (501, 200));
        assert!(
            crate::output::header::losses(&st).contains(
                "; 200 of 501 user stacks walked by frame pointers were cut where the walk \
                 read no return address"
            ),
            "{}",
            crate::output::header::losses(&st)
        );
        // rss's fault stacks are said beside the allocations', and counted in the header.
        let c = StackCounts {
            fault_fp: 40,
            fault_fp_cut: 7,
            ..c
        };
        assert_eq!(
            c.fp_clause().as_deref(),
            Some(
                "200 of 501 allocation stacks and 7 of 40 fault stacks walked by frame \
                 pointers were cut where the walk read no return address"
            )
        );
        c.add_to(&mut st);
        assert_eq!((st.fp_walked, st.fp_cut), (541, 207));
    }
}
