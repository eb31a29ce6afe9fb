//! The kernel log during the run: `/dev/kmsg` opened without blocking and moved to its end
//! at the start, so that the end reads only what was logged in between.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;

use super::parse::{OomKill, parse_kmsg_record, parse_oom_context, parse_oom_kill};

/// `/dev/kmsg`, or why it could not be read.
pub(super) enum KernelLog {
    Open(File),
    Unreadable(String),
}

/// What the kernel logged during the run.
#[derive(Debug, Default)]
pub(super) struct LogRead {
    pub kills: Vec<OomKill>,
    /// Records the kernel overwrote before they were read (`EPIPE`).
    pub overwritten: bool,
    /// Why reading stopped early, if it did.
    pub error: Option<String>,
}

impl KernelLog {
    /// Opens the log and skips what is already in it.
    pub(super) fn open() -> KernelLog {
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

    /// Reads the records logged since `open` and keeps the OOM kills.
    pub(super) fn read_new(&mut self) -> LogRead {
        let KernelLog::Open(file) = self else {
            return LogRead::default();
        };
        let mut out = LogRead::default();
        let mut memcg_of: HashMap<u32, Option<String>> = HashMap::new();
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
                    if let Some((pid, cg)) = parse_oom_context(&rec.message) {
                        memcg_of.insert(pid, cg);
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
            kill.cgroup = memcg_of.get(&kill.pid).cloned().flatten();
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
            "/dev/kmsg is not readable (kernel.dmesg_restrict = {restrict}): OOM kills are \
             counted from /proc/vmstat but not named; run as root or with CAP_SYSLOG"
        )
    } else {
        format!("/dev/kmsg cannot be opened ({e}): OOM kills are counted but not named")
    }
}
