//! Whether an event can be opened here, found by opening it (disabled, then closed): on
//! the whole system, else on this process, else on its user space only.

use crate::abi::PERF_SAMPLE_RAW;
use crate::events::{self, Builtin, EventKind};
use crate::sys::diagnose::{in_virtual_machine, short_reason};
use crate::sys::tracefs::{Tracefs, TracefsError};
use crate::sys::uprobe::{UprobeGroup, UprobePmu};
use crate::sys::{
    AttrConfig, EventClass, OpenContext, Opener, SysOpener, SystemFacts, build_attr,
    explain_open_error,
};
use crate::tool::Want;

/// What the caller can do with an event here, best first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Avail {
    Works,
    /// On the caller's own processes only, not system-wide.
    OwnOnly,
    /// On the caller's own processes, user space only: no kernel stacks.
    UserOnly,
    /// Not at all: why in a few words, and the fix.
    No {
        why: String,
        fix: String,
    },
}

impl Avail {
    fn rank(&self) -> u8 {
        match self {
            Avail::Works => 0,
            Avail::OwnOnly => 1,
            Avail::UserOnly => 2,
            Avail::No { .. } => 3,
        }
    }

    pub fn usable(&self) -> bool {
        !matches!(self, Avail::No { .. })
    }

    /// The availability column.
    pub fn short(&self) -> &str {
        match self {
            Avail::Works => "works here",
            Avail::OwnOnly => "own processes only: system-wide needs root or CAP_PERFMON",
            Avail::UserOnly => "works without kernel stacks (own processes, user space)",
            Avail::No { why, .. } => why,
        }
    }

    /// What to do to get more, if anything.
    pub fn fix(&self, paranoid: Option<i32>) -> Option<String> {
        let grant =
            "run as root or grant CAP_PERFMON (`sudo setcap cap_perfmon+ep $(which memperf)`)";
        match self {
            Avail::Works => None,
            Avail::OwnOnly => Some(format!(
                "for the whole system: `sudo sysctl kernel.perf_event_paranoid=0`, or {grant}"
            )),
            Avail::UserOnly => Some(format!(
                "for kernel stacks: `sudo sysctl kernel.perf_event_paranoid=1` (it is {}), or {grant}",
                paranoid.map_or("unreadable".to_string(), |p| p.to_string())
            )),
            Avail::No { fix, .. } => Some(fix.clone()),
        }
    }
}

/// The worse of two availabilities.
pub(super) fn worse(a: Avail, b: Avail) -> Avail {
    if b.rank() > a.rank() { b } else { a }
}

/// Opens events to see what works, with the facts the diagnosis needs.
pub(super) struct Prober {
    pub facts: SystemFacts,
    pub in_vm: bool,
    /// The kernel's version (major, minor, patch), from `osrelease`.
    pub kernel: Option<[u32; 3]>,
    pub tracefs: Result<Tracefs, TracefsError>,
    cpu: i32,
}

impl Prober {
    pub fn new() -> Prober {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Prober {
            facts: SystemFacts::read(),
            in_vm: in_virtual_machine(),
            kernel: parse_version(&release),
            tracefs: Tracefs::locate_or_mount(),
            cpu: crate::sys::online_cpus()
                .ok()
                .and_then(|c| c.first().copied())
                .map_or(0, |c| c as i32),
        }
    }

    /// Tries `cfg` system-wide, on this process, then on its user space only.
    fn open(&self, mut cfg: AttrConfig, event: &str, class: EventClass) -> Avail {
        cfg.disabled = true;
        cfg.exclude_hv = true;
        let try_open = |cfg: &AttrConfig, pid: i32, cpu: i32| {
            SysOpener.open(&build_attr(cfg), pid, cpu, -1, 0).map(drop)
        };
        if try_open(&cfg, -1, self.cpu).is_ok() {
            return Avail::Works;
        }
        if try_open(&cfg, 0, -1).is_ok() {
            return Avail::OwnOnly;
        }
        let user_only = AttrConfig {
            exclude_kernel: true,
            ..cfg
        };
        let errno = match try_open(&user_only, 0, -1) {
            Ok(()) if class != EventClass::Tracepoint => return Avail::UserOnly,
            Ok(()) => libc::EACCES,
            Err(e) => e,
        };
        let ctx = OpenContext {
            event,
            class,
            pid: None,
            cpu: None,
            system_wide: false,
        };
        Avail::No {
            why: short_reason(errno, class, &self.facts, self.in_vm),
            fix: explain_open_error(errno, &ctx, &self.facts),
        }
    }

    /// A software or hardware event.
    pub fn builtin(&self, b: &Builtin) -> Avail {
        let (type_, config, class) = match b.kind {
            EventKind::Hardware { config } => (
                perf_event_open_sys::bindings::PERF_TYPE_HARDWARE,
                config,
                EventClass::Hardware,
            ),
            EventKind::Software { config } => (
                perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE,
                config,
                EventClass::Software,
            ),
            _ => return self.unknown(b.name),
        };
        let cfg = AttrConfig {
            type_,
            config,
            ..AttrConfig::default()
        };
        self.open(cfg, b.name, class)
    }

    /// Why no tracepoint can be opened, when tracefs is not there for the caller.
    pub fn tracefs_unavailable(&self) -> Option<Avail> {
        let e = self.tracefs.as_ref().err()?;
        let why = match e {
            TracefsError::PermissionDenied { .. } => {
                "needs root or CAP_PERFMON (tracefs is not readable)"
            }
            TracefsError::NotMounted => "needs root (tracefs is not mounted; root mounts it)",
            TracefsError::NotBuiltIn => "no tracefs: the kernel lacks CONFIG_FTRACE",
            TracefsError::LockedDown { .. } => "kernel lockdown=confidentiality turns tracing off",
            _ => "no tracefs (CONFIG_FTRACE?)",
        };
        Some(Avail::No {
            why: why.to_string(),
            fix: e.to_string(),
        })
    }

    /// Tracepoint `system:name`, which Linux `since` added.
    pub fn tracepoint(&self, full: &str, since: &str) -> Avail {
        let tfs = match &self.tracefs {
            Ok(t) => t,
            Err(_) => return self.tracefs_unavailable().unwrap_or(Avail::Works),
        };
        let Some((system, name)) = full.split_once(':') else {
            return self.unknown(full);
        };
        match tfs.event_id(system, name) {
            Ok(id) => {
                let cfg = AttrConfig {
                    type_: perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT,
                    config: id,
                    sample_type: PERF_SAMPLE_RAW,
                    ..AttrConfig::default()
                };
                self.open(cfg, full, EventClass::Tracepoint)
            }
            Err(TracefsError::NoSuchTracepoint { .. }) => self.missing(full, since),
            Err(e @ TracefsError::PermissionDenied { .. }) => Avail::No {
                why: "needs root or CAP_PERFMON (tracefs is not readable)".to_string(),
                fix: e.to_string(),
            },
            Err(e) => Avail::No {
                why: format!("cannot read its id: {e}"),
                fix: e.to_string(),
            },
        }
    }

    /// A tracepoint this kernel lacks: too old, or built without it.
    fn missing(&self, full: &str, since: &str) -> Avail {
        let old = match (self.kernel, parse_version(since)) {
            (Some(k), Some(s)) => k < s,
            _ => false,
        };
        if old {
            Avail::No {
                why: format!("needs Linux {since}+"),
                fix: format!("`{full}` came in Linux {since}; this kernel is older"),
            }
        } else {
            Avail::No {
                why: format!("missing: {full}"),
                fix: format!(
                    "this kernel has no `{full}` (built without it?); `memperf list` shows the \
                     tracepoints it has"
                ),
            }
        }
    }

    fn unknown(&self, name: &str) -> Avail {
        Avail::No {
            why: "unknown event".to_string(),
            fix: format!("memperf knows no event `{name}`; `memperf list` shows those it knows"),
        }
    }

    /// An event by the name `memperf record -e` takes.
    pub fn event(&self, name: &str, since: &str) -> Avail {
        if name.contains(':') {
            return self.tracepoint(name, since);
        }
        let builtins = events::builtin_events();
        match builtins
            .iter()
            .find(|b| b.name == name || b.aliases.contains(&name))
        {
            Some(b) => self.builtin(b),
            None => self.unknown(name),
        }
    }

    /// Uprobes: privileges, and the uprobe PMU (4.17+) or a writable `uprobe_events`.
    /// (Creating a probe to try it would change the system; this reads what decides it.)
    pub fn uprobes(&self) -> Avail {
        let f = &self.facts;
        if !(f.euid == 0 || f.cap_perfmon || f.cap_sys_admin) {
            let ctx = OpenContext {
                event: "malloc",
                class: EventClass::Uprobe,
                pid: None,
                cpu: None,
                system_wide: false,
            };
            return Avail::No {
                why: short_reason(libc::EPERM, EventClass::Uprobe, f, self.in_vm),
                fix: explain_open_error(libc::EPERM, &ctx, f),
            };
        }
        let writable = self.tracefs.as_ref().is_ok_and(UprobeGroup::writable);
        if UprobePmu::read().is_some() || writable {
            return Avail::Works;
        }
        Avail::No {
            why: "no uprobes (CONFIG_UPROBE_EVENTS)".to_string(),
            fix: "this kernel has neither the uprobe PMU nor tracefs uprobe_events".to_string(),
        }
    }

    /// A tool: each of its events, and the tool as a whole (the worst of its required
    /// events; a tool whose events are all optional needs one of them).
    pub fn tool(&self, wants: &[Want]) -> (Avail, Vec<Avail>) {
        let each: Vec<Avail> = wants.iter().map(|w| self.event(w.name, w.since)).collect();
        let required: Vec<&Avail> = wants
            .iter()
            .zip(&each)
            .filter(|(w, _)| !w.optional)
            .map(|(_, a)| a)
            .collect();
        let whole = if required.is_empty() {
            each.iter()
                .min_by_key(|a| a.rank())
                .cloned()
                .unwrap_or(Avail::Works)
        } else {
            required.into_iter().cloned().fold(Avail::Works, worse)
        };
        (whole, each)
    }
}

/// `6.18.44-fc-v782` → [6, 18, 44]; `4.13` → [4, 13, 0].
pub(super) fn parse_version(s: &str) -> Option<[u32; 3]> {
    let mut out = [0u32; 3];
    let numeric = s.trim().split(|c: char| !(c.is_ascii_digit() || c == '.'));
    let parts = numeric.into_iter().next()?;
    for (i, p) in parts
        .split('.')
        .filter(|p| !p.is_empty())
        .take(3)
        .enumerate()
    {
        out[i] = p.parse().ok()?;
    }
    (out[0] > 0).then_some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert_eq!(parse_version("6.18.44-fc-v782\n"), Some([6, 18, 44]));
        assert_eq!(parse_version("4.13"), Some([4, 13, 0]));
        assert_eq!(parse_version("2.6.32"), Some([2, 6, 32]));
        assert!(parse_version("4.9").unwrap() < parse_version("4.13").unwrap());
        assert_eq!(parse_version("junk"), None);
    }

    #[test]
    fn the_worst_decides() {
        let no = Avail::No {
            why: "needs root".into(),
            fix: String::new(),
        };
        assert_eq!(worse(Avail::Works, Avail::UserOnly), Avail::UserOnly);
        assert_eq!(worse(Avail::OwnOnly, Avail::Works), Avail::OwnOnly);
        assert_eq!(worse(Avail::UserOnly, no.clone()), no);
        assert!(!no.usable() && Avail::UserOnly.usable());
        assert_eq!(no.short(), "needs root");
    }
}
