//! errno from `perf_event_open` or the ring mmap → one sentence saying why and what to do.

use std::path::Path;

/// What kind of event failed to open; the advice differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventClass {
    Software,
    Tracepoint,
    Hardware,
    Uprobe,
}

/// The open that failed.
#[derive(Debug, Clone)]
pub struct OpenContext<'a> {
    /// The event as the user wrote it.
    pub event: &'a str,
    pub class: EventClass,
    pub pid: Option<i32>,
    pub cpu: Option<i32>,
    pub system_wide: bool,
}

/// The system settings that decide what perf allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SystemFacts {
    /// `/proc/sys/kernel/perf_event_paranoid`.
    pub paranoid: Option<i32>,
    pub euid: u32,
    /// The real uid and gid: what ptrace access to a target process is checked against.
    pub uid: u32,
    pub gid: u32,
    pub cap_perfmon: bool,
    pub cap_sys_admin: bool,
    pub cap_ipc_lock: bool,
    /// `/proc/sys/kernel/perf_event_mlock_kb`.
    pub mlock_kb: Option<u64>,
    /// `/sys/bus/event_source/devices/cpu` (or a hybrid/ARM CPU PMU) exists.
    pub pmu_cpu_present: bool,
    /// `/proc/sys/kernel/kptr_restrict`.
    pub kptr_restrict: Option<i32>,
}

const CAP_IPC_LOCK: u32 = 14;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

fn read_number<T: std::str::FromStr>(path: &str) -> Option<T> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The `CapEff:` mask from `/proc/PID/status` text.
fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

fn cpu_pmu_present(devices: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(devices) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        matches!(&*name, "cpu" | "cpu_core" | "cpu_atom")
            || name.starts_with("armv8")
            || name.starts_with("armv7")
    })
}

impl SystemFacts {
    /// Reads the facts from /proc and /sys; anything unreadable is `None`/false.
    pub fn read() -> SystemFacts {
        let caps = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| parse_cap_eff(&s))
            .unwrap_or(0);
        let has = |bit: u32| caps & (1u64 << bit) != 0;
        SystemFacts {
            paranoid: read_number("/proc/sys/kernel/perf_event_paranoid"),
            // SAFETY: geteuid has no preconditions and cannot fail.
            euid: unsafe { libc::geteuid() },
            // SAFETY: getuid and getgid have no preconditions and cannot fail.
            uid: unsafe { libc::getuid() },
            // SAFETY: as above.
            gid: unsafe { libc::getgid() },
            cap_perfmon: has(CAP_PERFMON),
            cap_sys_admin: has(CAP_SYS_ADMIN),
            cap_ipc_lock: has(CAP_IPC_LOCK),
            mlock_kb: read_number("/proc/sys/kernel/perf_event_mlock_kb"),
            pmu_cpu_present: cpu_pmu_present(Path::new("/sys/bus/event_source/devices")),
            kptr_restrict: read_number("/proc/sys/kernel/kptr_restrict"),
        }
    }

    /// Root, CAP_PERFMON or CAP_SYS_ADMIN: paranoid does not apply.
    fn privileged(&self) -> bool {
        self.euid == 0 || self.cap_perfmon || self.cap_sys_admin
    }

    /// Whether tracepoints with their raw data may be opened: privileges, or
    /// perf_event_paranoid -1.
    pub fn may_read_tracepoints(&self) -> bool {
        self.privileged() || self.paranoid.is_some_and(|p| p <= -1)
    }
}

/// What a perf_event_paranoid value allows unprivileged users.
fn paranoid_meaning(p: i32) -> &'static str {
    match p {
        i32::MIN..=-1 => "allows everything to every user",
        0 => {
            "allows user and kernel profiling, system-wide too, but not raw tracepoint data \
             without privileges"
        }
        1 => "allows user and kernel profiling of your own processes, but not system-wide",
        2 => "allows only user-space profiling of your own processes",
        _ => "allows nothing without CAP_PERFMON (a Debian/Ubuntu setting)",
    }
}

/// `kernel.perf_event_paranoid is N, which allows ...`.
pub fn describe_paranoid(sys: &SystemFacts) -> String {
    match sys.paranoid {
        Some(p) => format!(
            "kernel.perf_event_paranoid is {p}, which {}",
            paranoid_meaning(p)
        ),
        None => "kernel.perf_event_paranoid could not be read".to_string(),
    }
}

fn target(ctx: &OpenContext) -> String {
    if ctx.system_wide {
        return " system-wide".to_string();
    }
    match (ctx.pid, ctx.cpu) {
        (Some(pid), _) if pid > 0 => format!(" on process {pid}"),
        (_, Some(cpu)) if cpu >= 0 => format!(" on cpu {cpu}"),
        _ => String::new(),
    }
}

/// The ids of a process from its `/proc/PID/status` text: (real, effective, saved) uids and
/// gids.
fn parse_ids(status: &str) -> Option<([u32; 3], [u32; 3])> {
    let ids = |key: &str| -> Option<[u32; 3]> {
        let line = status.lines().find_map(|l| l.strip_prefix(key))?;
        let mut it = line.split_whitespace().map(|w| w.parse::<u32>().ok());
        Some([it.next()??, it.next()??, it.next()??])
    };
    Some((ids("Uid:")?, ids("Gid:")?))
}

/// Why the kernel's ptrace check (PTRACE_MODE_READ_REALCREDS, which perf_event_open makes for
/// a task target) refuses `pid` to an unprivileged caller, when its credentials show it: the
/// process's real, effective and saved uids and gids must all be the caller's real ones.
fn ptrace_refusal(pid: i32, sys: &SystemFacts) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let (uids, gids) = parse_ids(&status)?;
    ptrace_refusal_for(uids, gids, sys)
}

fn ptrace_refusal_for(uids: [u32; 3], gids: [u32; 3], sys: &SystemFacts) -> Option<String> {
    if let Some(u) = uids.iter().find(|&&u| u != sys.uid) {
        return Some(format!("it runs as uid {u}, you as uid {}", sys.uid));
    }
    if let Some(g) = gids.iter().find(|&&g| g != sys.gid) {
        return Some(format!(
            "it runs with gid {g} (set-group-id), you with gid {}",
            sys.gid
        ));
    }
    None
}

fn explain_permission(errno: i32, ctx: &OpenContext, sys: &SystemFacts) -> String {
    let head = format!("permission denied opening `{}`{}", ctx.event, target(ctx));
    if sys.privileged() {
        return format!(
            "{head} even with root/CAP_PERFMON privileges ({}): a security module (SELinux, \
             AppArmor, kernel lockdown) or a seccomp filter probably denied it",
            errno_name(errno)
        );
    }
    let paranoid = describe_paranoid(sys);
    let grant = "run as root or grant CAP_PERFMON (Linux 5.8+) or CAP_SYS_ADMIN \
                 (`sudo setcap cap_perfmon+ep $(which memperf)`)";
    // The kernel creates uprobes for privileged users only, whatever paranoid says.
    if ctx.class == EventClass::Uprobe {
        return format!(
            "{head}: uprobes (what `memperf leak` probes allocators with) need root, or \
             CAP_PERFMON (Linux 5.8+) or CAP_SYS_ADMIN (`sudo setcap cap_perfmon+ep $(which \
             memperf)`); no kernel.perf_event_paranoid value allows them"
        );
    }
    // A task target needs ptrace read access to it, which no paranoid value gives.
    if let Some(pid) = ctx.pid.filter(|&p| p > 0)
        && let Some(why) = ptrace_refusal(pid, sys)
    {
        return format!(
            "{head}: profiling a process needs ptrace access to it and {why}: run memperf as \
             that user or as root, or grant CAP_SYS_PTRACE; kernel.perf_event_paranoid does \
             not change this"
        );
    }
    let fix = if ctx.class == EventClass::Tracepoint {
        format!(
            "tracepoints need privileges: {grant}, or `sudo sysctl kernel.perf_event_paranoid=-1`"
        )
    } else if ctx.system_wide || (ctx.cpu.is_some_and(|c| c >= 0) && ctx.pid.is_none_or(|p| p <= 0))
    {
        format!(
            "system-wide profiling needs `sudo sysctl kernel.perf_event_paranoid=0`, or {grant}"
        )
    } else if sys.paranoid.is_some_and(|p| p >= 3) {
        format!("{grant}, or `sudo sysctl kernel.perf_event_paranoid=2`")
    } else if ctx.pid.is_some_and(|p| p > 0) {
        format!(
            "profiling a process you do not own needs privileges ({grant}); for your own \
             processes use `--user-only` or the `:u` modifier, or `sudo sysctl kernel.perf_event_paranoid=1`"
        )
    } else {
        format!(
            "use `--user-only` or the `:u` modifier to leave out the kernel, or `sudo sysctl \
             kernel.perf_event_paranoid=1`, or {grant}"
        )
    };
    format!("{head}: {paranoid}; {fix}")
}

fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EINVAL => "EINVAL",
        _ => "error",
    }
}

const NO_PMU: &str = "this machine has no hardware PMU (virtual machines usually don't expose \
                      one); use a software event such as page-faults or cpu-clock";

/// Explains why `perf_event_open` failed with `errno` for `ctx`, and what to do about it.
pub fn explain_open_error(errno: i32, ctx: &OpenContext, sys: &SystemFacts) -> String {
    let ev = ctx.event;
    let hw_without_pmu = ctx.class == EventClass::Hardware && !sys.pmu_cpu_present;
    match errno {
        libc::EACCES | libc::EPERM => explain_permission(errno, ctx, sys),
        libc::ENOENT | libc::EOPNOTSUPP if hw_without_pmu => {
            format!("cannot open hardware event `{ev}`: {NO_PMU}")
        }
        libc::ENOENT => match ctx.class {
            EventClass::Tracepoint => {
                format!(
                    "cannot open `{ev}`: tracepoint not available on this kernel; `memperf list` shows the ones that are"
                )
            }
            EventClass::Hardware => format!(
                "cannot open `{ev}`: this CPU's PMU does not provide it; `memperf list` shows \
                 the events available here"
            ),
            EventClass::Uprobe => format!(
                "cannot open uprobe `{ev}`: the binary or symbol was not found, or this kernel \
                 lacks uprobes (CONFIG_UPROBE_EVENTS)"
            ),
            EventClass::Software => {
                format!("cannot open `{ev}`: this kernel does not support this software event")
            }
        },
        libc::EOPNOTSUPP => format!(
            "cannot open `{ev}`: the kernel or PMU does not support sampling it this way \
             (precise `:p` levels, branch or register sampling); try without `:p` or count it \
             with `memperf stat`"
        ),
        libc::ESRCH => match ctx.pid {
            Some(pid) => format!("cannot open `{ev}`: no such process {pid}"),
            None => format!("cannot open `{ev}`: the target process no longer exists"),
        },
        libc::EMFILE => format!(
            "cannot open `{ev}`: too many open files (one per event per CPU): raise `ulimit -n`"
        ),
        libc::ENFILE => format!(
            "cannot open `{ev}`: the system-wide file table is full: raise `fs.file-max` or \
             close other programs"
        ),
        libc::EINVAL => format!(
            "the kernel rejected the settings for `{ev}` (EINVAL): it is probably too old for a \
             requested feature (check `uname -r`), or a value is out of range: cpu{}, sampling \
             frequency above kernel.perf_event_max_sample_rate, or `:p` precision",
            ctx.cpu.map(|c| format!(" {c}")).unwrap_or_default()
        ),
        libc::EBUSY => format!(
            "cannot open `{ev}`: the PMU is in exclusive use by another tool (another perf \
             session, or the NMI watchdog: `sysctl kernel.nmi_watchdog=0`)"
        ),
        libc::E2BIG => format!(
            "cannot open `{ev}`: the kernel does not understand this perf_event_attr (E2BIG); \
             the kernel is older than the features memperf asked for"
        ),
        libc::ENODEV => format!(
            "cannot open `{ev}`: not supported on this CPU{} (ENODEV): the PMU lacks it or the \
             CPU is offline",
            ctx.cpu.map(|c| format!(" {c}")).unwrap_or_default()
        ),
        libc::EOVERFLOW => format!(
            "cannot open `{ev}`: the requested call-chain depth exceeds \
             kernel.perf_event_max_stack; lower it or raise the sysctl"
        ),
        _ => format!(
            "cannot open `{ev}`: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
    }
}

/// Whether /proc/cpuinfo's flags say the CPU is virtual (`hypervisor`).
pub fn in_virtual_machine() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|t| cpuinfo_says_hypervisor(&t))
}

fn cpuinfo_says_hypervisor(text: &str) -> bool {
    text.lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
}

/// Why there is no CPU PMU, in a few words.
pub fn no_pmu_reason(in_vm: bool) -> &'static str {
    if in_vm {
        "no PMU in this VM"
    } else {
        "no PMU on this machine"
    }
}

/// What [`explain_open_error`] says, in a few words for a column of `memperf list`: why an
/// event cannot be opened here.
pub fn short_reason(errno: i32, class: EventClass, sys: &SystemFacts, in_vm: bool) -> String {
    let no_pmu = class == EventClass::Hardware && !sys.pmu_cpu_present;
    match errno {
        libc::EACCES | libc::EPERM if sys.privileged() => {
            "denied by a security module or seccomp".to_string()
        }
        libc::EACCES | libc::EPERM => match class {
            EventClass::Tracepoint => {
                "needs root or CAP_PERFMON (or kernel.perf_event_paranoid=-1)".to_string()
            }
            EventClass::Uprobe => "needs root or CAP_PERFMON".to_string(),
            _ => format!(
                "needs root or CAP_PERFMON (kernel.perf_event_paranoid is {})",
                sys.paranoid
                    .map_or("unreadable".to_string(), |p| p.to_string())
            ),
        },
        libc::ENOENT | libc::EOPNOTSUPP if no_pmu => no_pmu_reason(in_vm).to_string(),
        libc::ENOENT if class == EventClass::Tracepoint => "not on this kernel".to_string(),
        libc::ENOENT if class == EventClass::Hardware => "not provided by this PMU".to_string(),
        libc::ENOENT => "not supported by this kernel".to_string(),
        libc::ENODEV => "not supported on this CPU".to_string(),
        libc::EOPNOTSUPP => "not supported this way by the kernel or PMU".to_string(),
        libc::EBUSY => "PMU busy (another perf session or the NMI watchdog)".to_string(),
        _ => format!("cannot open: {}", std::io::Error::from_raw_os_error(errno)),
    }
}

/// Explains a failed ring-buffer mmap of `pages` data pages (plus the control page).
pub fn explain_mmap_error(errno: i32, pages: usize, sys: &SystemFacts) -> String {
    let kib = (pages.saturating_add(1)).saturating_mul(super::page_size()) / 1024;
    let limit = sys
        .mlock_kb
        .map(|kb| format!("perf_event_mlock_kb={kb}"))
        .unwrap_or_else(|| "perf_event_mlock_kb".to_string());
    match errno {
        libc::EPERM | libc::ENOMEM if !(sys.euid == 0 || sys.cap_ipc_lock) => format!(
            "ring buffer of {kib} KiB exceeds the locked-memory limit ({limit}, per user, for \
             all CPUs' buffers together, plus `ulimit -l`); use a smaller `-m`, raise \
             kernel.perf_event_mlock_kb or run as root"
        ),
        libc::ENOMEM => format!(
            "ring buffer of {kib} KiB could not be mapped: out of memory; use a smaller `-m`"
        ),
        libc::EINVAL => {
            format!("ring buffer of {pages} pages was rejected: `-m` must be a power of two pages")
        }
        _ => format!(
            "failed to map a ring buffer of {kib} KiB: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
    }
}

/// A note for the summary when kernel symbols are hidden from us, or `None` when they are not.
pub fn kptr_restrict_note(sys: &SystemFacts) -> Option<String> {
    let level = sys.kptr_restrict?;
    // Level 1 hides addresses from readers without CAP_SYSLOG (root has it); 2 hides them
    // from everyone.
    let hidden = level >= 2 || (level == 1 && sys.euid != 0);
    hidden.then(|| {
        format!(
            "kernel symbols are hidden (kernel.kptr_restrict={level}), so kernel frames show \
             as [unknown]; run as root or `sudo sysctl kernel.kptr_restrict=0`"
        )
    })
}

#[cfg(test)]
#[path = "diagnose_tests.rs"]
mod tests;

/// Why `memperf mem record` finds no PMU that samples memory accesses (no Intel `cpu` PMU
/// with `mem-loads`/`mem-stores`, no AMD `ibs_op`, no Arm `arm_spe`): `cpu_pmu` says whether
/// a CPU PMU exists at all.
pub fn no_memory_pmu(in_vm: bool, cpu_pmu: bool) -> String {
    let what = "cannot sample memory accesses";
    let wanted = "/sys/bus/event_source/devices has no cpu PMU with mem-loads or mem-stores \
                  events (Intel PEBS), no ibs_op (AMD IBS) and no arm_spe (Arm SPE)";
    if in_vm && !cpu_pmu {
        format!(
            "{what}: no hardware PMU (a VM without a virtual PMU): {wanted}; run on bare metal \
             or give the VM a virtual PMU (KVM/QEMU `-cpu host,pmu=on`; most clouds offer it \
             only on whole-host or metal instances)"
        )
    } else if !cpu_pmu {
        format!("{what}: no hardware PMU on this machine: {wanted}")
    } else {
        format!(
            "{what}: this CPU's PMU has no precise memory sampling: {wanted}; `memperf record \
             -e cache-misses` counts misses without data addresses"
        )
    }
}
