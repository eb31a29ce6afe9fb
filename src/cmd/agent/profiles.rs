//! A window's aggregate cut into one pprof profile per process group, each sample labelled
//! with its process (pid, comm) and every profile with where it comes from (service, host,
//! container, kernel, memperf's version).

use rustc_hash::FxHashMap;

use super::groups::{Group, Groups};
use crate::aggregate::{Aggregate, Weigher};
use crate::config::report::ReportConfig;
use crate::output::Resolved;
use crate::output::pprof::{self, Label, Profile};

/// What every profile of this agent carries: the host and the software.
#[derive(Debug, Clone)]
pub(crate) struct HostLabels {
    pub host: String,
    pub kernel: String,
    pub version: String,
}

impl HostLabels {
    pub fn read() -> HostLabels {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        HostLabels {
            host: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// One group's profile of one window.
#[derive(Debug, Clone)]
pub(crate) struct GroupProfile {
    pub group: Group,
    pub profile: Profile,
    /// The labels every sample of the group has alike (service, host, ...: [`group_labels`]),
    /// their strings in the profile's table: kept once here, added to each sample only when
    /// a pprof file is written (`pprof::write_with_labels`); the backends with series carry
    /// them on the series instead.
    pub labels: Vec<Label>,
}

/// The window's shape: when it began (wall clock) and how long it was.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowTimes {
    pub start_unix_ns: i64,
    pub duration_ns: i64,
}

/// What cutting a window needs besides its aggregate.
pub(crate) struct Cut<'a> {
    pub rcfg: &'a ReportConfig,
    pub names: &'a [String],
    pub weighers: &'a [Weigher],
    pub host: &'a HostLabels,
    pub times: WindowTimes,
    /// Whether the free probe's columns carry the blocks in use (`aggregate::inuse`).
    pub inuse: bool,
    /// The column each event's samples count in (a probe's later sites have none of their
    /// own).
    pub columns: &'a [usize],
}

/// A prefix `COMM-PID` (`Prefix::Pid`) split into its command and pid.
fn comm_and_pid(prefix: &str) -> (&str, u32) {
    match prefix.rsplit_once('-') {
        Some((comm, pid)) => (comm, pid.parse().unwrap_or(0)),
        None => (prefix, 0),
    }
}

/// One profile per group of the window's processes, services in name order.
pub(crate) fn cut(
    agg: &mut Aggregate,
    res: &Resolved,
    groups: &mut Groups,
    cut: &Cut<'_>,
) -> Vec<GroupProfile> {
    // Each prefix's group, and the groups in name order.
    let mut group_of_prefix: FxHashMap<u32, usize> = FxHashMap::default();
    let mut found: Vec<Group> = Vec::new();
    for (id, prefix) in agg.prefixes.iter() {
        let (comm, pid) = comm_and_pid(prefix);
        let g = groups.of(pid, comm);
        let at = match found.iter().position(|f| *f == g) {
            Some(at) => at,
            None => {
                found.push(g);
                found.len() - 1
            }
        };
        group_of_prefix.insert(id, at);
    }
    let counts = std::mem::take(&mut agg.counts);
    let bytes = std::mem::take(&mut agg.bytes);
    let mut split_counts = vec![FxHashMap::default(); found.len()];
    let mut split_bytes = vec![FxHashMap::default(); found.len()];
    for (key, n) in counts {
        if let Some(&g) = group_of_prefix.get(&key.1) {
            split_counts[g].insert(key, n);
        }
    }
    for (key, b) in bytes {
        if let Some(&g) = group_of_prefix.get(&key.1) {
            split_bytes[g].insert(key, b);
        }
    }
    // Every profile has every event's columns, whether or not this window saw it.
    for (i, k) in agg.stats.kept.iter_mut().enumerate() {
        if cut.columns.get(i).is_none_or(|&c| c == i) {
            *k = (*k).max(1);
        }
    }
    let folded = agg.stats.folded;
    let mut out = Vec::new();
    for (g, (group, (c, b))) in found
        .into_iter()
        .zip(split_counts.into_iter().zip(split_bytes))
        .enumerate()
    {
        agg.counts = c;
        agg.bytes = b;
        let mut profile = pprof::build(cut.rcfg, None, cut.names, cut.weighers, agg, res);
        let labels = relabel(&mut profile, &group, cut.host);
        super::otel_memory::name_columns(&mut profile, cut.names, cut.inuse);
        profile.time_nanos = cut.times.start_unix_ns;
        profile.duration_nanos = cut.times.duration_ns;
        if folded > 0 && g == 0 {
            pprof::add_comment(
                &mut profile,
                &format!(
                    "{folded} samples of this window past the bound on stacks, kept without \
                     their stacks"
                ),
            );
        }
        out.push(GroupProfile {
            group,
            profile,
            labels,
        });
    }
    out.sort_by(|a, b| a.group.service.cmp(&b.group.service));
    out
}

/// The keys of [`group_labels`]: the labels every sample of a group has alike, which the
/// backends with series (Parca, Pyroscope) put on the series instead.
pub(super) const GROUP_LABEL_KEYS: &[&str] = &[
    "service_name",
    "host",
    "kernel",
    "memperf_version",
    "container_id",
];

/// The group's and the host's labels: its service, the host, kernel and memperf version,
/// and its container where it has one.
pub(super) fn group_labels<'a>(
    group: &'a Group,
    host: &'a HostLabels,
) -> Vec<(&'static str, &'a str)> {
    let mut labels = vec![
        ("service_name", group.service.as_str()),
        ("host", host.host.as_str()),
        ("kernel", host.kernel.as_str()),
        ("memperf_version", host.version.as_str()),
    ];
    if let Some(c) = &group.container {
        labels.push(("container_id", c.as_str()));
    }
    labels
}

/// Each sample's `comm` label (the `COMM-PID` prefix) becomes `comm` and `pid`; the group's
/// and host's labels are put in the string table and returned, for the pprof files.
fn relabel(p: &mut Profile, group: &Group, host: &HostLabels) -> Vec<Label> {
    let mut strings = StringIds::of(p);
    let comm_key = strings.id(p, "comm");
    let pid_key = strings.id(p, "pid");
    let fixed: Vec<Label> = group_labels(group, host)
        .into_iter()
        .map(|(k, v)| Label {
            key: strings.id(p, k),
            str: strings.id(p, v),
            ..Label::default()
        })
        .collect();
    for si in 0..p.sample.len() {
        let mut labels = std::mem::take(&mut p.sample[si].label);
        for l in labels.iter_mut() {
            if l.key != comm_key {
                continue;
            }
            let prefix = p
                .string_table
                .get(l.str as usize)
                .cloned()
                .unwrap_or_default();
            let (comm, pid) = comm_and_pid(&prefix);
            l.str = strings.id(p, comm);
            labels.reserve_exact(1);
            labels.push(Label {
                key: pid_key,
                num: i64::from(pid),
                ..Label::default()
            });
            break;
        }
        p.sample[si].label = labels;
    }
    fixed
}

/// The string ids of a built profile, for adding strings to it.
pub(super) struct StringIds(FxHashMap<String, i64>);

impl StringIds {
    pub(super) fn of(p: &Profile) -> StringIds {
        StringIds(
            p.string_table
                .iter()
                .enumerate()
                .map(|(i, s)| (s.clone(), i as i64))
                .collect(),
        )
    }

    pub(super) fn id(&mut self, p: &mut Profile, s: &str) -> i64 {
        if let Some(&i) = self.0.get(s) {
            return i;
        }
        p.string_table.push(s.to_string());
        let i = p.string_table.len() as i64 - 1;
        self.0.insert(s.to_string(), i);
        i
    }
}

#[cfg(test)]
mod tests {
    use rustc_hash::FxHashMap;

    use super::{Cut, HostLabels, WindowTimes, comm_and_pid, cut};
    use crate::aggregate::{Aggregate, FrameKey, ReadStats, StackBook, Weigher};
    use crate::config::report::{Input, Prefix, ReportConfig, ReportOutput, StackSpace};
    use crate::output::{FrameInfo, Resolved};
    use crate::stacks::CodeAddr;

    /// A window of two processes whose stacks share no frame: each group's profile holds
    /// its own frames' locations, functions and names alone, numbered from one (as Parca's
    /// server requires), and not the window's every frame (which each of a window's groups
    /// built and kept until it was shipped: its string table held every group's function
    /// names, its vectors the room of every frame).
    #[test]
    fn a_groups_profile_holds_its_own_frames_only() {
        let mut book = StackBook::new(StackSpace::All);
        let mut names = Vec::new();
        let mut stack = |book: &mut StackBook, fns: [&str; 2], at: u64| {
            let ids: Vec<_> = (0..2u64)
                .map(|i| {
                    let key = FrameKey::Kernel {
                        addr: CodeAddr::new(at + i, false),
                    };
                    names.push(fns[i as usize].to_string());
                    book.frames.intern(&key)
                })
                .collect();
            book.stacks.intern(ids)
        };
        let alpha = stack(&mut book, ["alpha_main", "alpha_leaf"], 0x1000);
        let beta = stack(&mut book, ["beta_main", "beta_leaf"], 0x2000);
        let mut prefixes = crate::stacks::FrameTable::default();
        // Pids past the kernel's limit: no cgroup to read, each is its command's group.
        let (pa, pb) = (
            prefixes.intern(&"alpha-4194400".to_string()),
            prefixes.intern(&"beta-4194401".to_string()),
        );
        let mut agg = Aggregate {
            book,
            prefixes,
            counts: [((0, pa, alpha), 3), ((0, pb, beta), 5)]
                .into_iter()
                .collect(),
            maps: crate::maps::ProcessMaps::default(),
            stats: ReadStats {
                samples: vec![8],
                kept: vec![8],
                ..ReadStats::default()
            },
            by: FxHashMap::default(),
            timeline: std::collections::BTreeMap::new(),
            sized: vec![false],
            bytes: FxHashMap::default(),
        };
        let res = Resolved {
            info: (0..names.len())
                .map(|i| FrameInfo {
                    addr: i as u64,
                    sym: None,
                    off: None,
                    dso: "[kernel.kallsyms]".into(),
                })
                .collect(),
            lines: names.iter().map(|_| vec![(None, None)]).collect(),
            names: names.into_iter().map(|n| vec![n]).collect(),
            unknown_frames: 0,
            symbolize: Default::default(),
            kernel_hidden: false,
            kernel_names: Default::default(),
            recovered_mark: None,
        };
        let rcfg = ReportConfig {
            output: ReportOutput::Pprof("-".into()),
            prefix: Prefix::Pid,
            ..ReportConfig::plain(Input::File("test".into()))
        };
        let host = HostLabels {
            host: "h".into(),
            kernel: "k".into(),
            version: "v".into(),
        };
        let c = Cut {
            rcfg: &rcfg,
            names: &["page-faults".to_string()],
            weighers: &[Weigher::None],
            host: &host,
            times: WindowTimes {
                start_unix_ns: 0,
                duration_ns: 0,
            },
            inuse: false,
            columns: &[0],
        };
        let mut groups = super::Groups::new(Vec::new(), None);
        let profiles = cut(&mut agg, &res, &mut groups, &c);
        let services: Vec<_> = profiles.iter().map(|p| p.group.service.as_str()).collect();
        assert_eq!(services, ["alpha", "beta"]);
        for (gp, (own, other)) in profiles.iter().zip([("alpha", "beta"), ("beta", "alpha")]) {
            let p = &gp.profile;
            let location_ids: Vec<u64> = p.location.iter().map(|l| l.id).collect();
            let function_ids: Vec<u64> = p.function.iter().map(|f| f.id).collect();
            let mapping_ids: Vec<u64> = p.mapping.iter().map(|m| m.id).collect();
            assert_eq!(
                (location_ids, function_ids, mapping_ids),
                (vec![1, 2], vec![1, 2], vec![1])
            );
            assert_eq!(p.sample.len(), 1);
            // Leaf first.
            assert_eq!(p.sample[0].location_id, [2, 1]);
            let fname = |l: usize| {
                let f = p.location[l].line[0].function_id as usize;
                p.string_table[p.function[f - 1].name as usize].as_str()
            };
            assert_eq!(
                (fname(0), fname(1)),
                (&*format!("{own}_main"), &*format!("{own}_leaf"))
            );
            assert!(
                !p.string_table.iter().any(|s| s.starts_with(other)),
                "{own}'s profile names {other}'s frames: {:?}",
                p.string_table
            );
        }
    }

    #[test]
    fn a_prefix_splits_at_its_last_dash() {
        assert_eq!(comm_and_pid("kworker-u8-4242"), ("kworker-u8", 4242));
        assert_eq!(comm_and_pid("app-7"), ("app", 7));
        assert_eq!(comm_and_pid("odd"), ("odd", 0));
    }
}
