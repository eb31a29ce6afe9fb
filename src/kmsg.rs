//! The kernel log, `/dev/kmsg`: opened without blocking and moved to its end, so that a
//! reader sees only what is logged after it opened it, and the parsers of the records an
//! OOM kill writes. `triage` reads the kills of its run from it; `oomkill` reads the
//! victim's cgroup from the kernel's own `oom-kill:` line, since the victim's
//! `/proc/PID/cgroup` is gone (or moved to the root) once it is killed.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

/// `/dev/kmsg`, or why it could not be read.
pub(crate) enum KernelLog {
    Open(File),
    Unreadable(String),
}

/// What the kernel logged since the last read.
#[derive(Debug, Default)]
pub(crate) struct LogRead {
    /// The `Killed process` lines, each with its `oom-kill:` line's memory cgroup.
    pub kills: Vec<OomKill>,
    /// The `oom-kill:` lines, by victim pid.
    pub contexts: HashMap<u32, OomContext>,
    /// Records the kernel overwrote before they were read (`EPIPE`).
    pub overwritten: bool,
    /// Why reading stopped early, if it did.
    pub error: Option<String>,
}

impl KernelLog {
    /// Opens the log and skips what is already in it.
    pub(crate) fn open() -> KernelLog {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg");
        let mut file = match file {
            Ok(f) => f,
            Err(e) => return KernelLog::Unreadable(unreadable(&e)),
        };
        // SEEK_END on /dev/kmsg moves past the last record.
        match file.seek(SeekFrom::End(0)) {
            Ok(_) => KernelLog::Open(file),
            Err(e) => KernelLog::Unreadable(format!("cannot seek /dev/kmsg: {e}")),
        }
    }

    /// Reads the records logged since the last read (or `open`) and keeps the OOM kills.
    pub(crate) fn read_new(&mut self) -> LogRead {
        let KernelLog::Open(file) = self else {
            return LogRead::default();
        };
        let mut out = LogRead::default();
        // One read is one record; a record is at most 8 KiB (CONSOLE_EXT_LOG_MAX).
        let mut buf = vec![0u8; 8192];
        // Bounded: the log could be written as fast as it is read.
        for _ in 0..100_000 {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    let Some(rec) = parse_kmsg_record(&text) else {
                        continue;
                    };
                    if let Some(c) = parse_oom_context(&rec.message) {
                        out.contexts.insert(c.pid, c);
                    } else if let Some(mut kill) = parse_oom_kill(&rec.message) {
                        kill.usec = rec.usec;
                        out.kills.push(kill);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::BrokenPipe => out.overwritten = true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    out.error = Some(format!("reading /dev/kmsg failed: {e}"));
                    break;
                }
            }
        }
        for kill in &mut out.kills {
            kill.cgroup = out
                .contexts
                .get(&kill.pid)
                .and_then(|c| c.oom_memcg.clone());
        }
        out
    }
}

fn unreadable(e: &std::io::Error) -> String {
    if e.kind() == ErrorKind::PermissionDenied {
        let restrict = std::fs::read_to_string("/proc/sys/kernel/dmesg_restrict")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".to_string());
        format!(
            "/dev/kmsg is not readable (kernel.dmesg_restrict = {restrict}); run as root or \
             with CAP_SYSLOG"
        )
    } else {
        format!("/dev/kmsg cannot be opened ({e})")
    }
}

/// One record of `/dev/kmsg`: `prio,seq,usec,flags[,...];message` then continuation lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KmsgRecord {
    pub seq: u64,
    /// Microseconds since boot (CLOCK_MONOTONIC).
    pub usec: u64,
    pub message: String,
}

pub(crate) fn parse_kmsg_record(rec: &str) -> Option<KmsgRecord> {
    let (head, rest) = rec.split_once(';')?;
    let mut h = head.split(',');
    let _prio = h.next()?;
    let seq = h.next()?.parse().ok()?;
    let usec = h.next()?.parse().ok()?;
    let message = rest.lines().next().unwrap_or_default().to_string();
    Some(KmsgRecord { seq, usec, message })
}

/// What the kernel log says of one OOM kill.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OomKill {
    pub pid: u32,
    pub comm: String,
    /// `Memory cgroup out of memory`: the kill was of a cgroup at its limit.
    pub memcg: bool,
    /// From the `oom-kill:` line before it (4.19+): the cgroup whose limit was hit.
    pub cgroup: Option<String>,
    /// Microseconds since boot.
    pub usec: u64,
}

/// `Out of memory: Killed process 1234 (app) total-vm:...` and `Memory cgroup out of
/// memory: Killed process ...` (4.19+; older kernels said `Killed process` on a line of
/// its own after `Kill process ... or sacrifice child`).
pub(crate) fn parse_oom_kill(msg: &str) -> Option<OomKill> {
    let at = msg.find("Killed process ")?;
    let rest = &msg[at + "Killed process ".len()..];
    let (pid, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix('(')?;
    // A comm may hold `)`: the kernel's next words are ` total-vm:`, else take the last `)`.
    let end = rest.find(") total-vm:").or_else(|| rest.rfind(')'))?;
    Some(OomKill {
        pid: pid.parse().ok()?,
        comm: rest[..end].to_string(),
        memcg: msg.starts_with("Memory cgroup out of memory"),
        cgroup: None,
        usec: 0,
    })
}

/// What the kernel's `oom-kill:` line (4.19+, logged before the victim is killed) says of
/// one kill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OomContext {
    pub pid: u32,
    /// `CONSTRAINT_NONE` (the whole system), `CONSTRAINT_MEMCG`, `CONSTRAINT_CPUSET`...
    pub constraint: String,
    /// The memory cgroup whose limit was hit (a memcg OOM only).
    pub oom_memcg: Option<String>,
    /// The victim's memory cgroup, as the kernel saw it when it chose the victim.
    pub task_memcg: Option<String>,
}

/// `oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,
/// oom_memcg=/cg,task_memcg=/cg,task=hog,pid=1234,uid=0` (a global OOM has `global_oom`
/// instead of `oom_memcg=`).
pub(crate) fn parse_oom_context(msg: &str) -> Option<OomContext> {
    let rest = msg.strip_prefix("oom-kill:")?;
    // The task's name may hold commas and `=`: the fields before `,task=` are read by
    // name, the pid from the end.
    let (fields, task) = rest.rsplit_once(",task=")?;
    let (_, pid) = task.rsplit_once(",pid=")?;
    let pid = pid.split(',').next()?.parse().ok()?;
    let mut c = OomContext {
        pid,
        constraint: String::new(),
        oom_memcg: None,
        task_memcg: None,
    };
    for kv in fields.split(',') {
        match kv.split_once('=') {
            Some(("constraint", v)) => c.constraint = v.to_string(),
            Some(("oom_memcg", v)) => c.oom_memcg = Some(v.to_string()),
            Some(("task_memcg", v)) => c.task_memcg = Some(v.to_string()),
            _ => {}
        }
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn kmsg_records_and_oom_kills() {
        let r = parse_kmsg_record(
            "3,1234,5678901,-;Memory cgroup out of memory: Killed process 4242 (hog-nofp) \
             total-vm:69924kB, anon-rss:65024kB, file-rss:1280kB, shmem-rss:0kB, UID:0 \
             pgtables:176kB oom_score_adj:0\n SUBSYSTEM=memory\n",
        )
        .unwrap();
        assert_eq!((r.seq, r.usec), (1234, 5678901));
        let k = parse_oom_kill(&r.message).unwrap();
        assert_eq!((k.pid, k.comm.as_str(), k.memcg), (4242, "hog-nofp", true));
        let k =
            parse_oom_kill("Out of memory: Killed process 77 (my) app) total-vm:1kB, anon-rss:0kB")
                .unwrap();
        assert_eq!((k.pid, k.comm.as_str(), k.memcg), (77, "my) app", false));
        // Before 4.19 the victim line had no prefix.
        let k = parse_oom_kill("Killed process 9 (x) total-vm:1kB").unwrap();
        assert_eq!((k.pid, k.memcg), (9, false));
        assert!(parse_oom_kill("oom_reaper: reaped process 4242 (hog)").is_none());
        assert!(parse_kmsg_record("no header").is_none());

        let c = parse_oom_context(
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,\
             oom_memcg=/memperf-test-oom-1,task_memcg=/memperf-test-oom-1,task=hog,pid=4242,uid=0",
        );
        let c = c.unwrap();
        assert_eq!((c.pid, c.constraint.as_str()), (4242, "CONSTRAINT_MEMCG"));
        assert_eq!(c.oom_memcg.as_deref(), Some("/memperf-test-oom-1"));
        assert_eq!(c.task_memcg.as_deref(), Some("/memperf-test-oom-1"));
        let c = parse_oom_context(
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,\
             global_oom,task_memcg=/a/b,task=x,pid=1,pid=5,uid=0",
        )
        .unwrap();
        assert_eq!((c.pid, c.oom_memcg), (5, None));
        assert_eq!(c.task_memcg.as_deref(), Some("/a/b"));
    }
}
