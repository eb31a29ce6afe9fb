//! The recording's feature sections, written at its end: system facts, the recorded
//! tracepoints' formats, the build-ids of the files samples hit (a deleted one kept in the
//! build-id cache) and what only memperf counted.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustc_hash::FxHashSet;

use super::super::keep::KeptBinaries;
use super::super::open::Opened;
use super::super::remap;
use crate::config::record::RecordConfig;
use crate::events::EventKind;
use crate::perfdata::{
    BuildIdEntry, ClockData, Features, MemperfStats, TracepointFormat, tracing_data,
};
use crate::procfs;
use crate::session::Session;
use crate::sys::tracefs::Tracefs;

/// The feature sections: system facts, tracepoint formats, build-ids of what was hit.
pub(super) fn build_features(
    cfg: &RecordConfig,
    opened: &Opened,
    session: &Session,
    clock: Option<ClockData>,
    kept: &mut KeptBinaries,
) -> Features {
    let mut f = Features::from_system(cfg.cmdline.clone());
    if let Some(tfs) = &opened.tracefs {
        f.tracing_data = tracing_data_of(tfs, opened);
    }
    f.build_ids = build_ids(session, kept);
    if let (Some(a), Some(b)) = (session.stats().first_time, session.stats().last_time) {
        f.sample_time = Some((a, b));
    }
    if opened.clock_monotonic {
        // HEADER_CLOCKID holds the clock resolution in ns: CLOCK_MONOTONIC ticks in ns.
        f.clockid = Some(1);
    }
    f.clock_data = clock;
    let mut stats = memperf_stats(session);
    let k = kept.stats;
    stats.counts.extend([
        ("binaries_learned".to_string(), k.learned),
        ("binaries_unreadable".to_string(), k.unreadable),
        ("binaries_released".to_string(), k.released),
        ("binaries_kept".to_string(), k.kept),
        ("binaries_lost".to_string(), k.lost),
    ]);
    f.memperf_stats = Some(stats);
    f
}

/// The tracing data section: the formats of the recorded tracepoints (not those the
/// recorder added for itself), with tracefs's headers and printk formats.
fn tracing_data_of(tfs: &Tracefs, opened: &Opened) -> Option<Vec<u8>> {
    let mut formats = Vec::new();
    for ev in opened
        .events
        .iter()
        .filter(|e| !remap::is_added(&e.spec.name))
    {
        if let EventKind::Tracepoint { system, name } = &ev.spec.kind
            && let Ok(format) = tfs.format(system, name)
        {
            formats.push(TracepointFormat {
                system: system.clone(),
                name: name.clone(),
                format,
            });
        }
    }
    let (Ok(hp), Ok(he)) = (tfs.header_page(), tfs.header_event()) else {
        return None;
    };
    let printk = tfs.printk_formats().unwrap_or_else(|e| {
        eprintln!(
            "memperf: note: {e}; `const char *` tracepoint fields will print as \
             addresses"
        );
        Vec::new()
    });
    Some(tracing_data(&hp, &he, &formats, &printk))
}

/// The build-ids of the files samples hit: those learned at their first mapping, then
/// the others read now, then the kernel's when a sample had a kernel stack.
fn build_ids(session: &Session, kept: &mut KeptBinaries) -> Vec<BuildIdEntry> {
    let hit: FxHashSet<Vec<u8>> = session
        .procs()
        .hit_dsos()
        .map(|(_, path)| path.to_vec())
        .collect();
    let mut ids = Vec::new();
    // The files learned at their first mapping, each by its own build-id (two builds at
    // one path apart), the deleted or replaced ones kept in the build-id cache.
    let mut seen = FxHashSet::default();
    for k in kept.finish(&hit, DELETED_COPY_TIMEOUT) {
        seen.insert(k.path.clone());
        ids.push(BuildIdEntry {
            pid: k.pid as i32,
            kernel: false,
            build_id: k.build_id,
            filename: String::from_utf8_lossy(&k.path).into_owned(),
        });
    }
    if kept.stats.lost > 0 {
        eprintln!(
            "memperf: warning: {} executable files deleted or replaced during the recording \
             could not be kept in the build-id cache: their frames will be unnamed",
            kept.stats.lost
        );
    }
    read_hit_build_ids(session, &mut seen, &mut ids);
    if session.stats().kernel_stacks
        && let Some(id) = crate::buildid::kernel_build_id()
    {
        ids.push(BuildIdEntry {
            pid: -1,
            kernel: true,
            build_id: id,
            filename: "[kernel.kallsyms]".to_string(),
        });
    }
    ids
}

/// Reads the build-id of each file samples hit that is not `seen` yet (a deleted one is
/// kept in the build-id cache first), each within the read timeout: a hung mount must not
/// hold the end of the recording (one that did is not asked again).
fn read_hit_build_ids(
    session: &Session,
    seen: &mut FxHashSet<Vec<u8>>,
    ids: &mut Vec<BuildIdEntry>,
) {
    for (pid, path) in session.procs().hit_dsos() {
        if !seen.insert(path.to_vec()) {
            continue;
        }
        let owned = Path::new(OsStr::from_bytes(path)).to_path_buf();
        let deleted = path.ends_with(b" (deleted)");
        let read = crate::mapped::bounded(DELETED_COPY_TIMEOUT, move || {
            if deleted {
                keep_deleted(pid, &owned)
            } else {
                crate::buildid::file_build_id(&owned)
            }
        });
        let Some(read) = read else {
            break;
        };
        if let Ok(Some(id)) = read {
            ids.push(BuildIdEntry {
                pid: pid as i32,
                kernel: false,
                build_id: id,
                filename: String::from_utf8_lossy(path).into_owned(),
            });
        }
    }
}

/// What only memperf knows about its recording: the user stacks it unwound while recording
/// (their raw bytes are not in the file, so no reader can count these again) and how many
/// were truncated, by reason, and how soon those past their copy were read.
fn memperf_stats(session: &Session) -> MemperfStats {
    let st = session.stats();
    let mut stats = MemperfStats { counts: Vec::new() };
    // Per event, so that an output of one event counts its own.
    for (ev, u) in st.unwinds.iter().enumerate() {
        stats.push_event_unwinds(ev, (*u).into());
    }
    let mut counts = vec![
        ("unwound".to_string(), st.unwound),
        ("truncated".to_string(), st.truncated),
        ("shed".to_string(), st.shed),
        ("foreign_ids".to_string(), st.foreign_ids),
        (
            "foreign_skipped".to_string(),
            st.foreign_ids - st.foreign_attributed,
        ),
    ];
    if let Some(u) = session.unwinders() {
        let s = u.stats();
        for (name, n) in s.truncated.named() {
            counts.push((format!("truncated.{name}"), n));
        }
        counts.extend([
            ("cut_at_copy_end".to_string(), s.cut_at_copy_end),
            ("recovered".to_string(), s.recovered),
            ("recovered_frames".to_string(), s.recovered_frames),
            ("recovery_rejected".to_string(), s.recovery_rejected),
        ]);
        for (name, n) in s.rejected.named() {
            counts.push((format!("rejected.{name}"), n));
        }
    }
    // What the process table held (README, "Memory").
    let held = session.procs().held();
    counts.extend([
        ("held_processes_peak".to_string(), held.peak as u64),
        ("reaped_processes".to_string(), held.reaped),
    ]);
    // How long after its time each stack past its copy was unwound (read from the live
    // process), when one was.
    let d = &st.read_delay;
    if let (Some(p50), Some(p99)) = (d.quantile(0.5), d.quantile(0.99)) {
        counts.extend([
            ("read_delay_count".to_string(), d.count),
            ("read_delay_p50_ns".to_string(), p50),
            ("read_delay_p99_ns".to_string(), p99),
            ("read_delay_max_ns".to_string(), d.max_ns),
        ]);
    }
    stats.counts.extend(counts);
    stats
}

/// How long copying a deleted binary into the build-id cache may take at the end.
const DELETED_COPY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A binary deleted while its process ran (a package upgrade): copied, through the
/// process's `/proc/PID/map_files`, into the build-id cache, where the report finds it by
/// the build-id this returns once the process is gone.
fn keep_deleted(pid: u32, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let maps = procfs::read_maps(pid)?;
    let Some(m) = maps
        .iter()
        .find(|m| m.path.as_slice() == path.as_os_str().as_bytes())
    else {
        return Ok(None);
    };
    let via = crate::mapped::map_files_path(pid, m.start, m.end - m.start);
    crate::buildid::keep_in_cache(&via).or_else(|e| {
        eprintln!(
            "memperf: warning: failed to keep `{}` in the build-id cache: {e}",
            path.display()
        );
        crate::buildid::file_build_id(&via)
    })
}
