//! User probes: tracefs `uprobe_events` groups (kernel 3.5+, return probes 3.10+) and the
//! uprobe PMU (4.17+).
//!
//! A tracefs probe is one kernel consumer shared by every perf event opened on it, so per-CPU
//! and per-thread events add almost nothing per hit; each perf event opened on the uprobe PMU
//! is a consumer of its own, run on every hit. memperf therefore prefers tracefs and uses the
//! PMU only where `uprobe_events` cannot be written.

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::tracefs::Tracefs;
use super::uprobe_clash;

/// The prefix of every probe group memperf creates: `memperf_<pid>`.
pub const GROUP_PREFIX: &str = "memperf_";

/// Errors from creating or removing probes.
#[derive(Debug, thiserror::Error)]
pub enum UprobeError {
    #[error("cannot probe `{}`: tracefs probe definitions cannot name a path with white space", .0.display())]
    PathWithSpace(PathBuf),
    // Causes are part of the messages, not `source`s, so that anyhow says them once.
    #[error("failed to write `{line}` to {}: {cause}", .path.display())]
    Write {
        line: String,
        path: PathBuf,
        cause: io::Error,
    },
    /// Refused beside another tracefs probe of the same instruction (`sys::uprobe_clash`).
    #[error("{0}")]
    Clash(String),
    #[error("failed to read the id of probe `{group}:{name}`: {cause}")]
    Id {
        group: String,
        name: String,
        cause: super::tracefs::TracefsError,
    },
}

/// What memperf found when it looked for a way to place uprobes, for the sentence that says
/// why it cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UprobeAbsence {
    /// Not root: `uprobe_events` needs root, and the kernel offers no uprobe PMU either.
    NotRoot,
    /// Root, tracefs there, but no `uprobe_events` in it and no uprobe PMU: the kernel was
    /// built without `CONFIG_UPROBE_EVENTS` (which brings both).
    NotBuiltIn,
    /// Root, no tracefs at all (built without tracing, `CONFIG_FTRACE`, which
    /// `CONFIG_UPROBE_EVENTS` needs) and no uprobe PMU.
    NoTracing,
    /// Root, `uprobe_events` there but not writable, and no uprobe PMU.
    NotWritable,
}

impl UprobeAbsence {
    /// Classifies, from whether we are root, whether tracefs was found, and whether it has
    /// an `uprobe_events` file.
    pub fn classify(root: bool, tracefs: Option<&Tracefs>) -> UprobeAbsence {
        match (root, tracefs) {
            (false, _) => UprobeAbsence::NotRoot,
            (true, None) => UprobeAbsence::NoTracing,
            (true, Some(t)) if !t.root().join("uprobe_events").exists() => {
                UprobeAbsence::NotBuiltIn
            }
            (true, Some(_)) => UprobeAbsence::NotWritable,
        }
    }

    /// One sentence, naming the configuration option a kernel needs.
    pub fn explain(self) -> &'static str {
        match self {
            UprobeAbsence::NotRoot => {
                "writing tracefs uprobe_events needs root, and this kernel has no uprobe PMU \
                 (Linux 4.17+ built with CONFIG_UPROBE_EVENTS) for other users"
            }
            UprobeAbsence::NotBuiltIn => {
                "this kernel was built without CONFIG_UPROBE_EVENTS: tracefs has no \
                 uprobe_events and there is no uprobe PMU"
            }
            UprobeAbsence::NoTracing => {
                "this kernel has neither tracefs nor a uprobe PMU: it was built without \
                 CONFIG_UPROBE_EVENTS (which needs CONFIG_FTRACE)"
            }
            UprobeAbsence::NotWritable => {
                "tracefs uprobe_events is not writable, and this kernel has no uprobe PMU \
                 (Linux 4.17+ built with CONFIG_UPROBE_EVENTS)"
            }
        }
    }
}

/// One probe definition: `p:` (entry) or `r:` (return) at `path:0xoffset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeDef {
    pub name: String,
    pub path: PathBuf,
    /// File offset of the probed instruction.
    pub offset: u64,
    pub ret: bool,
    /// Fetch arguments, e.g. `size=%si:u64` (named so that in-kernel filters can use them).
    pub args: Vec<String>,
}

impl ProbeDef {
    /// The line written to `uprobe_events`.
    pub fn line(&self, group: &str) -> Result<String, UprobeError> {
        let path = self.path.to_string_lossy();
        if path.contains(char::is_whitespace) {
            return Err(UprobeError::PathWithSpace(self.path.clone()));
        }
        let kind = if self.ret { 'r' } else { 'p' };
        let mut line = format!("{kind}:{group}/{} {path}:0x{:x}", self.name, self.offset);
        for a in &self.args {
            line.push(' ');
            line.push_str(a);
        }
        Ok(line)
    }
}

/// The probes of one run, in the group `memperf_<our pid>`; removed on drop. Close every perf
/// event opened on them first: the kernel refuses (EBUSY) to remove a probe in use.
#[derive(Debug)]
pub struct UprobeGroup {
    tracefs: Tracefs,
    group: String,
    created: Vec<String>,
}

impl UprobeGroup {
    /// A group named after this process.
    pub fn new(tracefs: Tracefs) -> UprobeGroup {
        UprobeGroup {
            tracefs,
            group: format!("{GROUP_PREFIX}{}", std::process::id()),
            created: Vec::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.group
    }

    fn events_file(&self) -> PathBuf {
        self.tracefs.root().join("uprobe_events")
    }

    /// Whether `uprobe_events` exists and can be opened for writing.
    pub fn writable(tracefs: &Tracefs) -> bool {
        OpenOptions::new()
            .append(true)
            .open(tracefs.root().join("uprobe_events"))
            .is_ok()
    }

    /// Creates the probe and returns its tracepoint id.
    pub fn add(&mut self, def: &ProbeDef) -> Result<u64, UprobeError> {
        let line = def.line(&self.group)?;
        self.add_line(&def.name, &line)
    }

    /// Creates probe `name` from a whole definition line (`p:GROUP/NAME PATH:0xOFF(0xREF)
    /// ARGS`, as built by `ProbeDef::line` and extended) and returns its tracepoint id.
    pub fn add_line(&mut self, name: &str, line: &str) -> Result<u64, UprobeError> {
        append_line(&self.events_file(), line).map_err(|e| self.why_refused(line, e))?;
        self.created.push(name.to_string());
        self.tracefs
            .event_id(&self.group, name)
            .map_err(|cause| UprobeError::Id {
                group: self.group.clone(),
                name: name.to_string(),
                cause,
            })
    }

    /// A definition refused with EINVAL beside another tool's tracefs probe of the same
    /// instruction with another reference counter: said so, naming that probe.
    fn why_refused(&self, line: &str, e: UprobeError) -> UprobeError {
        let UprobeError::Write { cause, .. } = &e else {
            return e;
        };
        let events = self.events_file();
        let others = match (
            cause.raw_os_error() == Some(libc::EINVAL),
            uprobe_clash::parse_definition(line),
            fs::read_to_string(&events),
        ) {
            (true, Some(ours), Ok(text)) => {
                let others = uprobe_clash::clashing_definitions(&text, &ours.site);
                (!others.is_empty()).then_some((ours, others))
            }
            _ => None,
        };
        match others {
            Some((ours, others)) => UprobeError::Clash(uprobe_clash::explain_definition(
                &ours.site, &others, &events,
            )),
            None => e,
        }
    }

    /// Removes every probe this group created; returns the first failure, after trying all.
    pub fn remove_all(&mut self) -> Result<(), UprobeError> {
        let path = self.events_file();
        let mut first = None;
        for name in std::mem::take(&mut self.created) {
            let line = format!("-:{}/{name}", self.group);
            if let Err(e) = append_line(&path, &line)
                && first.is_none()
            {
                first = Some(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for UprobeGroup {
    fn drop(&mut self) {
        let _ = self.remove_all();
    }
}

fn append_line(path: &Path, line: &str) -> Result<(), UprobeError> {
    let err = |cause| UprobeError::Write {
        line: line.to_string(),
        path: path.to_path_buf(),
        cause,
    };
    let mut f = OpenOptions::new().append(true).open(path).map_err(err)?;
    // One write per definition: the kernel parses each write as one command.
    f.write_all(format!("{line}\n").as_bytes()).map_err(err)
}

/// Probe groups `memperf_<pid>` in `uprobe_events` text whose process is no running memperf
/// (`alive` says which are): what an earlier run killed with SIGKILL left behind, its pid
/// since gone or reused. Returns (group, name) pairs.
pub fn stale_probes(text: &str, alive: impl Fn(u32) -> bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        // `p:memperf_123/malloc /usr/lib/...:0x... args`
        let Some(def) = line.split_whitespace().next() else {
            continue;
        };
        let Some((_, qualified)) = def.split_once(':') else {
            continue;
        };
        let Some((group, name)) = qualified.split_once('/') else {
            continue;
        };
        let Some(pid) = group
            .strip_prefix(GROUP_PREFIX)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !alive(pid) {
            out.push((group.to_string(), name.to_string()));
        }
    }
    out
}

/// Removes the probes of groups whose pid is no running memperf (`is_memperf` says which
/// is); returns how many were removed, or the first failure after trying all. A probe the
/// kernel keeps (EBUSY) has events open on it: some live program uses it, it is no stale
/// one, and is left.
pub fn remove_stale(
    tracefs: &Tracefs,
    is_memperf: impl Fn(u32) -> bool,
) -> Result<usize, UprobeError> {
    let path = tracefs.root().join("uprobe_events");
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(0);
    };
    let mut removed = 0;
    let mut first = None;
    for (group, name) in stale_probes(&text, is_memperf) {
        match append_line(&path, &format!("-:{group}/{name}")) {
            Ok(()) => removed += 1,
            Err(UprobeError::Write { cause, .. }) if cause.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    first.map_or(Ok(removed), Err)
}

/// The uprobe PMU: its type and the config bit that makes a return probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobePmu {
    pub type_: u32,
    pub retprobe_bit: u32,
}

const PMU_DIR: &str = "/sys/bus/event_source/devices/uprobe";

impl UprobePmu {
    /// Reads `/sys/bus/event_source/devices/uprobe/{type,format/retprobe}`; None before 4.17.
    pub fn read() -> Option<UprobePmu> {
        Self::read_at(Path::new(PMU_DIR))
    }

    pub fn read_at(dir: &Path) -> Option<UprobePmu> {
        let type_ = fs::read_to_string(dir.join("type"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let fmt = fs::read_to_string(dir.join("format/retprobe")).ok()?;
        Some(UprobePmu {
            type_,
            retprobe_bit: parse_config_bit(&fmt)?,
        })
    }

    /// `attr.config` for an entry or a return probe.
    pub fn config(&self, ret: bool) -> u64 {
        if ret { 1u64 << self.retprobe_bit } else { 0 }
    }
}

/// `config:0` → 0.
fn parse_config_bit(text: &str) -> Option<u32> {
    text.trim().strip_prefix("config:")?.parse().ok()
}

/// A probe path kept alive for the uprobe PMU: `attr.config1` points at its bytes, which the
/// kernel reads during perf_event_open.
#[derive(Debug)]
pub struct PmuPath(CString);

impl PmuPath {
    pub fn new(path: &Path) -> io::Result<PmuPath> {
        use std::os::unix::ffi::OsStrExt;
        CString::new(path.as_os_str().as_bytes())
            .map(PmuPath)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    /// The probed file's path.
    pub fn path(&self) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(self.0.as_bytes()))
    }

    /// The value for `attr.config1` (`uprobe_path`). Valid while `self` lives.
    pub fn config1(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_uprobes_is_named_by_its_config_option() {
        let dir =
            std::env::temp_dir().join(format!("memperf-uprobe-absence-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let t = Tracefs::at(dir.clone());
        // Root, tracefs without uprobe_events: built without CONFIG_UPROBE_EVENTS.
        let built_without = UprobeAbsence::classify(true, Some(&t));
        assert_eq!(built_without, UprobeAbsence::NotBuiltIn);
        assert!(
            built_without
                .explain()
                .contains("built without CONFIG_UPROBE_EVENTS")
        );
        // Root, no tracefs: the option is named, and the tracing it needs.
        let no_tracing = UprobeAbsence::classify(true, None);
        assert!(no_tracing.explain().contains("CONFIG_UPROBE_EVENTS"));
        assert!(no_tracing.explain().contains("CONFIG_FTRACE"));
        // The file there but refused: not "built without".
        fs::write(dir.join("uprobe_events"), "").unwrap();
        assert_eq!(
            UprobeAbsence::classify(true, Some(&t)),
            UprobeAbsence::NotWritable
        );
        // Not root: root is the first thing to say.
        let user = UprobeAbsence::classify(false, Some(&t));
        assert!(
            user.explain()
                .starts_with("writing tracefs uprobe_events needs root")
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn probe_lines_follow_the_uprobe_events_syntax() {
        let def = ProbeDef {
            name: "malloc".into(),
            path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
            offset: 0x98930,
            ret: false,
            args: vec!["size=%si:u64".into()],
        };
        assert_eq!(
            def.line("memperf_42").unwrap(),
            "p:memperf_42/malloc /lib/x86_64-linux-gnu/libc.so.6:0x98930 size=%si:u64"
        );
        let ret = ProbeDef {
            ret: true,
            args: vec![],
            name: "malloc_ret".into(),
            ..def
        };
        assert_eq!(
            ret.line("g").unwrap(),
            "r:g/malloc_ret /lib/x86_64-linux-gnu/libc.so.6:0x98930"
        );
        let spaced = ProbeDef {
            path: "/tmp/a b/libc.so".into(),
            ..ret
        };
        assert!(matches!(
            spaced.line("g"),
            Err(UprobeError::PathWithSpace(_))
        ));
    }

    #[test]
    fn stale_groups_are_those_of_dead_processes() {
        let text = "p:memperf_100/malloc /lib/libc.so.6:0x98930 size=%si:u64\n\
                    r:memperf_100/malloc_ret /lib/libc.so.6:0x98930\n\
                    p:memperf_200/free /lib/libc.so.6:0x98ef3\n\
                    p:other_1/x /bin/true:0x10\n\
                    p:memperf_x/y /bin/true:0x10\n";
        let stale = stale_probes(text, |pid| pid == 200);
        assert_eq!(
            stale,
            vec![
                ("memperf_100".to_string(), "malloc".to_string()),
                ("memperf_100".to_string(), "malloc_ret".to_string()),
            ]
        );
    }

    #[test]
    fn pmu_format_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("format")).unwrap();
        fs::write(dir.path().join("type"), "8\n").unwrap();
        fs::write(dir.path().join("format/retprobe"), "config:0\n").unwrap();
        let pmu = UprobePmu::read_at(dir.path()).unwrap();
        assert_eq!(
            pmu,
            UprobePmu {
                type_: 8,
                retprobe_bit: 0
            }
        );
        assert_eq!(pmu.config(true), 1);
        assert_eq!(pmu.config(false), 0);
        assert_eq!(UprobePmu::read_at(&dir.path().join("none")), None);
    }
}
