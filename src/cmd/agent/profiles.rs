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
        relabel(&mut profile, &group, cut.host);
        super::otel_memory::name_columns(&mut profile, cut.names, cut.inuse);
        prune(&mut profile);
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
        out.push(GroupProfile { group, profile });
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

/// Each sample's `comm` label (the `COMM-PID` prefix) becomes `comm` and `pid`, and the
/// group's and host's labels follow.
fn relabel(p: &mut Profile, group: &Group, host: &HostLabels) {
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
            labels.push(Label {
                key: pid_key,
                num: i64::from(pid),
                ..Label::default()
            });
            break;
        }
        labels.extend(fixed.iter().cloned());
        p.sample[si].label = labels;
    }
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

/// Leaves out the locations, functions and mappings no sample of this group reaches (the
/// window's frames are shared by all its groups).
fn prune(p: &mut Profile) {
    let used: rustc_hash::FxHashSet<u64> = p
        .sample
        .iter()
        .flat_map(|s| s.location_id.iter().copied())
        .collect();
    p.location.retain(|l| used.contains(&l.id));
    let functions: rustc_hash::FxHashSet<u64> = p
        .location
        .iter()
        .flat_map(|l| l.line.iter().map(|l| l.function_id))
        .collect();
    p.function.retain(|f| functions.contains(&f.id));
    let mappings: rustc_hash::FxHashSet<u64> = p.location.iter().map(|l| l.mapping_id).collect();
    p.mapping.retain(|m| mappings.contains(&m.id));
    renumber(p);
}

/// Numbers the mappings, locations and functions left 1, 2, 3 ... in their order, as
/// Parca's server requires of a profile (it refuses one whose ids have gaps: "location id
/// is not sequential"), and points the samples, locations and lines at the new numbers.
fn renumber(p: &mut Profile) {
    fn new_ids(ids: impl Iterator<Item = u64>) -> FxHashMap<u64, u64> {
        ids.zip(1..).collect()
    }
    let mappings = new_ids(p.mapping.iter().map(|m| m.id));
    let functions = new_ids(p.function.iter().map(|f| f.id));
    let locations = new_ids(p.location.iter().map(|l| l.id));
    let at = |map: &FxHashMap<u64, u64>, id: u64| map.get(&id).copied().unwrap_or(0);
    for m in &mut p.mapping {
        m.id = at(&mappings, m.id);
    }
    for f in &mut p.function {
        f.id = at(&functions, f.id);
    }
    for l in &mut p.location {
        l.id = at(&locations, l.id);
        l.mapping_id = at(&mappings, l.mapping_id);
        for line in &mut l.line {
            line.function_id = at(&functions, line.function_id);
        }
    }
    for s in &mut p.sample {
        for id in &mut s.location_id {
            *id = at(&locations, *id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::comm_and_pid;
    use crate::output::pprof::{Function, Line, Location, Mapping, Profile, Sample};

    #[test]
    fn what_pruning_leaves_is_numbered_from_one() {
        let loc = |id, mapping_id, function_id| Location {
            id,
            mapping_id,
            line: vec![Line {
                function_id,
                line: 0,
            }],
            ..Location::default()
        };
        let mut p = Profile {
            mapping: (1..=3)
                .map(|id| Mapping {
                    id,
                    ..Mapping::default()
                })
                .collect(),
            function: (1..=4)
                .map(|id| Function {
                    id,
                    ..Function::default()
                })
                .collect(),
            location: vec![loc(1, 1, 1), loc(2, 2, 2), loc(3, 3, 3), loc(4, 3, 4)],
            // Only the second and the last locations are reached.
            sample: vec![Sample {
                location_id: vec![4, 2],
                value: vec![1],
                ..Sample::default()
            }],
            ..Profile::default()
        };
        super::prune(&mut p);
        let m: Vec<u64> = p.mapping.iter().map(|m| m.id).collect();
        let f: Vec<u64> = p.function.iter().map(|f| f.id).collect();
        let l: Vec<u64> = p.location.iter().map(|l| l.id).collect();
        assert_eq!((m, f, l), (vec![1, 2], vec![1, 2], vec![1, 2]));
        assert_eq!(p.sample[0].location_id, vec![2, 1]);
        // Location 4 (now 2) was in mapping 3 (now 2) and named function 4 (now 2).
        assert_eq!(p.location[1].mapping_id, 2);
        assert_eq!(p.location[1].line[0].function_id, 2);
        assert_eq!(p.location[0].mapping_id, 1);
    }

    #[test]
    fn a_prefix_splits_at_its_last_dash() {
        assert_eq!(comm_and_pid("kworker-u8-4242"), ("kworker-u8", 4242));
        assert_eq!(comm_and_pid("app-7"), ("app", 7));
        assert_eq!(comm_and_pid("odd"), ("odd", 0));
    }
}
