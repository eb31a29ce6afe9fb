//! Why the kernel refuses a uprobe with EINVAL when another tool probes the same
//! instruction. The kernel keeps one uprobe per file (inode) and offset, shared by every tool
//! that probes there, and refuses a second whose reference counter offset (`ref_ctr_offset`,
//! the USDT semaphore it counts up while the probe is in use) is not the first one's: tracefs
//! refuses the definition (`validate_ref_ctr_offset`, against tracefs probes only), and
//! opening the event refuses the registration against any probe, a uprobe PMU event's or a
//! BPF link's too (`alloc_uprobe`, which logs `ref_ctr_offset mismatch. inode: 0x..
//! offset: 0x.. ref_ctr_offset(old): 0x.. ref_ctr_offset(new): 0x..`). BCC's Python tools
//! (memleak-bpfcc among them) pass a random offset with every probe (iovisor/bcc#5236): while
//! one of them traces malloc, memperf's probe at malloc's entry is refused. Without this
//! module memperf said the kernel was probably too old.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where a uprobe sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The probed file, when known (a uprobe PMU event of `leak` keeps only its offset).
    pub path: Option<PathBuf>,
    pub offset: u64,
    /// The reference counter's file offset, if the probe has one.
    pub ref_ctr: Option<u64>,
}

/// A tracefs uprobe as `uprobe_events` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defined {
    /// `GROUP/NAME`.
    pub event: String,
    pub site: Site,
}

/// One `uprobe_events` line, `p:GROUP/NAME PATH:0xOFFSET[(0xREF)] [ARGS]` (as memperf
/// writes it; the kernel lists the offset zero-padded, return probes as `r:`).
pub fn parse_definition(line: &str) -> Option<Defined> {
    let mut words = line.split_whitespace();
    let (kind, event) = words.next()?.split_once(':')?;
    if !(kind.starts_with('p') || kind.starts_with('r')) || !event.contains('/') {
        return None;
    }
    let (path, at) = words.next()?.rsplit_once(':')?;
    let (offset, ref_ctr) = match at.split_once('(') {
        Some((o, r)) => (o, Some(parse_hex(r.strip_suffix(')')?)?)),
        None => (at, None),
    };
    Some(Defined {
        event: event.to_string(),
        site: Site {
            path: Some(PathBuf::from(path)),
            offset: parse_hex(offset)?,
            ref_ctr,
        },
    })
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Whether two paths name one file (by device and inode; by the path when either cannot be
/// looked at).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// The tracefs probes in `uprobe_events` text at the instruction of `site` with another
/// reference counter: those beside which tracefs refuses `site`'s definition.
pub fn clashing_definitions(text: &str, site: &Site) -> Vec<Defined> {
    let Some(path) = &site.path else {
        return Vec::new();
    };
    text.lines()
        .filter_map(parse_definition)
        .filter(|d| {
            d.site.offset == site.offset
                && d.site.ref_ctr.unwrap_or(0) != site.ref_ctr.unwrap_or(0)
                && d.site.path.as_deref().is_some_and(|p| same_file(p, path))
        })
        .collect()
}

/// The kernel log's record of a refused uprobe: the existing probe's reference counter
/// offset beside the refused one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub inode: u64,
    pub offset: u64,
    pub existing: u64,
    pub refused: u64,
}

/// A `ref_ctr_offset mismatch` message (kernel/events/uprobes.c, `ref_ctr_mismatch_warn`).
pub fn parse_mismatch(msg: &str) -> Option<Mismatch> {
    let rest = msg.split("ref_ctr_offset mismatch.").nth(1)?;
    let field = |key: &str| -> Option<u64> {
        let after = rest.split(key).nth(1)?;
        parse_hex(after.split_whitespace().next()?)
    };
    Some(Mismatch {
        inode: field("inode:")?,
        offset: field("offset:")?,
        existing: field("ref_ctr_offset(old):")?,
        refused: field("ref_ctr_offset(new):")?,
    })
}

/// A `/dev/kmsg` record, `PRIORITY,SEQUENCE,MICROSECONDS,FLAGS;MESSAGE`: its time (since
/// boot, as CLOCK_MONOTONIC counts) and message.
fn parse_kmsg(record: &str) -> Option<(u64, &str)> {
    let (head, msg) = record.split_once(';')?;
    let us = head.split(',').nth(2)?.parse().ok()?;
    Some((us, msg.lines().next().unwrap_or("")))
}

/// How far back the kernel log is searched: the refusal is logged as the open fails, an
/// instant before memperf explains it.
const LOG_WINDOW_US: u64 = 10_000_000;

/// The newest refusal the kernel logged in the last seconds at `offset` (of the file with
/// `inode`, when known). None when there is none or the log cannot be read (it needs
/// CAP_SYSLOG under kernel.dmesg_restrict, which root has).
pub fn logged_mismatch(inode: Option<u64>, offset: u64) -> Option<Mismatch> {
    let since = (super::clock_monotonic_ns() / 1000).saturating_sub(LOG_WINDOW_US);
    let mut kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut found = None;
    let mut buf = vec![0u8; 8192];
    // One record a read; EAGAIN at the end, EPIPE where records were overwritten meanwhile.
    for _ in 0..1_000_000 {
        let n = match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(_) => break,
        };
        let record = String::from_utf8_lossy(&buf[..n]);
        let Some((us, msg)) = parse_kmsg(&record) else {
            continue;
        };
        if us < since {
            continue;
        }
        if let Some(m) = parse_mismatch(msg)
            && m.offset == offset
            && inode.is_none_or(|i| i == m.inode)
        {
            found = Some(m);
        }
    }
    found
}

/// `PATH at 0xOFFSET`, or the offset alone.
fn place(site: &Site) -> String {
    match &site.path {
        Some(p) => format!("`{}` at 0x{:x}", p.display(), site.offset),
        None => format!("file offset 0x{:x}", site.offset),
    }
}

fn counter(r: Option<u64>) -> String {
    match r.filter(|&r| r != 0) {
        Some(r) => format!("reference counter offset 0x{r:x}"),
        None => "no reference counter".to_string(),
    }
}

const BCC: &str = "BCC's Python tools (memleak-bpfcc among them) give every probe a random \
                   one (iovisor/bcc#5236)";

/// Why the kernel refused, with EINVAL, to open an event on the uprobe at `site`: the
/// kernel log's record of the refusal when it has one, else the likely cause.
pub fn explain_open(site: &Site, logged: Option<&Mismatch>) -> String {
    let at = place(site);
    match logged {
        Some(m) => format!(
            "the kernel refused the uprobe at {at} (EINVAL): another tool has a uprobe at that \
             instruction with {}, this one has {}, and the kernel shares an instruction only \
             between probes with the same (its log says `ref_ctr_offset mismatch`); {BCC}. \
             Stop the tool that traces it, or wait until it has exited, and run memperf again",
            counter(Some(m.existing)),
            counter(Some(m.refused)),
        ),
        None => format!(
            "the kernel refused the uprobe at {at} (EINVAL): most likely another tool has a \
             uprobe at that instruction with another reference counter offset, which the kernel \
             refuses to share it with (its log then says `ref_ctr_offset mismatch`; `dmesg` \
             shows it to root); {BCC}. Stop the tool that traces it, or wait until it has \
             exited, and run memperf again"
        ),
    }
}

/// Why tracefs refused the definition of a probe at `site` beside `others` (what
/// [`clashing_definitions`] found).
pub fn explain_definition(site: &Site, others: &[Defined], events_file: &Path) -> String {
    let names: Vec<String> = others
        .iter()
        .map(|d| format!("`{}` ({})", d.event, counter(d.site.ref_ctr)))
        .collect();
    let remove = others
        .first()
        .map(|d| format!("`echo '-:{}' >> {}`", d.event, events_file.display()))
        .unwrap_or_default();
    format!(
        "tracefs refuses a probe at {} with {} (EINVAL): {} {} at that instruction, and \
         probes of one instruction must have the same reference counter offset; stop the \
         tool that placed it, or remove the probe ({remove}) once it is done",
        place(site),
        counter(site.ref_ctr),
        if names.len() == 1 {
            "tracefs probe"
        } else {
            "tracefs probes"
        },
        names.join(", ") + if names.len() == 1 { " is" } else { " are" },
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_read_as_the_kernel_lists_them() {
        let d = parse_definition(
            "p:memperf_7/malloc /usr/lib/x86_64-linux-gnu/libc.so.6:0x0000000000098930 size=%di:u64",
        )
        .unwrap();
        assert_eq!(d.event, "memperf_7/malloc");
        assert_eq!(d.site.offset, 0x98930);
        assert_eq!(d.site.ref_ctr, None);
        let r = parse_definition("r:g/x /bin/a:0x10(0x2a)").unwrap();
        assert_eq!((r.site.offset, r.site.ref_ctr), (0x10, Some(0x2a)));
        assert_eq!(parse_definition("-:g/x"), None);
        assert_eq!(parse_definition("p:g/x /bin/a"), None);
    }

    #[test]
    fn only_probes_of_the_same_instruction_with_another_counter_clash() {
        let text = "p:bcc/a /bin/true:0x10(0x6)\n\
                    p:same/b /bin/true:0x10\n\
                    p:elsewhere/c /bin/true:0x20(0x6)\n\
                    p:otherfile/d /bin/sh:0x10(0x6)\n";
        let site = Site {
            path: Some(PathBuf::from("/bin/true")),
            offset: 0x10,
            ref_ctr: None,
        };
        let found: Vec<String> = clashing_definitions(text, &site)
            .into_iter()
            .map(|d| d.event)
            .collect();
        assert_eq!(found, vec!["bcc/a".to_string()]);
        let msg = explain_definition(
            &site,
            &clashing_definitions(text, &site),
            Path::new("/sys/kernel/tracing/uprobe_events"),
        );
        assert!(
            msg.contains("`bcc/a` (reference counter offset 0x6)"),
            "{msg}"
        );
        assert!(msg.contains("echo '-:bcc/a'"), "{msg}");
    }

    #[test]
    fn the_kernel_logs_refusal_is_read() {
        let rec = "4,8123,52635974075,-;ref_ctr_offset mismatch. inode: 0x4fa7d offset: \
                   0x98930 ref_ctr_offset(old): 0x6 ref_ctr_offset(new): 0x0\n";
        let (us, msg) = parse_kmsg(rec).unwrap();
        assert_eq!(us, 52_635_974_075);
        assert_eq!(
            parse_mismatch(msg),
            Some(Mismatch {
                inode: 0x4fa7d,
                offset: 0x98930,
                existing: 6,
                refused: 0
            })
        );
        assert_eq!(parse_mismatch("uprobe: something else"), None);
        let site = Site {
            path: None,
            offset: 0x98930,
            ref_ctr: None,
        };
        let msg = explain_open(&site, parse_mismatch(msg).as_ref());
        assert!(
            msg.contains("with reference counter offset 0x6, this one has no reference counter"),
            "{msg}"
        );
        assert!(!explain_open(&site, None).contains("too old"));
    }
}
