//! `memperf oomkill`: every OOM kill, who triggered it and the trigger's stack, as BCC's
//! oomkill prints it, from the `oom:mark_victim` tracepoint instead of a kprobe.

use std::io::{self, Write};

use anyhow::Result;

use crate::cli::tool::ToolArgs;
use crate::session::SampleCtx;
use crate::tool::{self, Cx, Tool, Want};

/// Fires in the task that ran out of memory (the trigger); its `pid` field is the victim.
pub(crate) const WANTS: &[Want] = &[Want {
    name: "oom:mark_victim",
    since: "4.13",
    optional: false,
    filter: None,
}];

struct OomKill;

impl Tool for OomKill {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let trigger = tool::comm(s.procs, pid, tid);
        let victim = cx.field_signed(s, "pid").unwrap_or(-1);
        // The comm field exists from Linux 6.9; before, the name the session knows.
        let victim_comm = cx.field_str(s, "comm").unwrap_or_else(|| {
            let v = u32::try_from(victim).unwrap_or(0);
            tool::comm(s.procs, v, v)
        });
        let time = s.sample.time.map(|t| cx.time_of_day(t)).unwrap_or_default();
        let mut line = format!(
            "{time} Triggered by PID {pid} (\"{trigger}\"), OOM kill of PID {victim} (\"{victim_comm}\")"
        );
        if cx.has_field(s.ev, "total_vm") {
            let kb = |name| cx.field(s, name).unwrap_or(0);
            line.push_str(&format!(
                ", total-vm {} kB, anon-rss {} kB, file-rss {} kB, shmem-rss {} kB, oom_score_adj {}",
                kb("total_vm"),
                kb("anon_rss"),
                kb("file_rss"),
                kb("shmem_rss"),
                cx.field_signed(s, "oom_score_adj").unwrap_or(0)
            ));
        }
        // What only the live system can say: the load, and the trigger's cgroup.
        if !cx.replay {
            if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
                line.push_str(&format!(", loadavg: {}", load.trim()));
            }
            writeln!(cx.out, "{line}")?;
            if let Some(cg) = memory_cgroup(pid) {
                writeln!(cx.out, "  cgroup: {cg}")?;
            }
        } else {
            writeln!(cx.out, "{line}")?;
        }
        let stack = cx.stack(s);
        writeln!(cx.out, "  Stack trace of PID {pid} (\"{trigger}\"):")?;
        cx.write_stack(stack, s.procs)
    }
}

/// The memory cgroup of `pid` as oomkill prints it: `memory:PATH` (v1) or `unified:PATH`.
fn memory_cgroup(pid: u32) -> Option<String> {
    let cg = crate::procfs::memory_cgroup(pid)?;
    Some(match cg.version {
        crate::procfs::CgroupVersion::V1 => format!("memory:{}", cg.path),
        crate::procfs::CgroupVersion::V2 => format!("unified:{}", cg.path),
    })
}

/// Runs `memperf oomkill`.
pub fn run(args: ToolArgs) -> Result<i32> {
    let cfg = args.into_config(true)?;
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(cx.out, "Tracing OOM kills... Ctrl-C to stop.")?;
        }
        Ok(())
    };
    let seen = tool::run("oomkill", &cfg, WANTS, &mut OomKill, out, &banner)?;
    tool::print_seen("oomkill", &seen);
    Ok(0)
}
