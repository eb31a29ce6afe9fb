//! `memperf oomkill`: every OOM kill, who triggered it and the trigger's stack, as BCC's
//! oomkill prints it, from the `oom:mark_victim` tracepoint instead of a kprobe.

use std::collections::HashMap;
use std::io::{self, Write};

use anyhow::Result;

use crate::kmsg::{KernelLog, OomContext};
use crate::session::SampleCtx;
use crate::tool::{self, Cx, Tool, ToolConfig, Want};

/// Fires in the task that ran out of memory (the trigger); its `pid` field is the victim.
pub(crate) const WANTS: &[Want] = &[Want {
    name: "oom:mark_victim",
    since: "4.13",
    optional: false,
    filter: None,
}];

struct OomKill {
    /// The kernel log, opened before tracing starts (live runs only).
    log: Option<KernelLog>,
    /// `oom-kill:` lines read and not yet matched to a kill, by victim pid.
    contexts: HashMap<u32, OomContext>,
}

impl OomKill {
    /// The kernel's `oom-kill:` line of `victim`'s kill, read from the log. The kernel
    /// logs it before it marks the victim, so it is there when the sample is; a few short
    /// waits cover a log written by another CPU.
    fn context(&mut self, victim: u32) -> Option<OomContext> {
        let log = self.log.as_mut()?;
        for attempt in 0..10 {
            self.contexts.extend(log.read_new().contexts);
            if let Some(c) = self.contexts.remove(&victim) {
                return Some(c);
            }
            if attempt < 9 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        None
    }

    /// `  cgroup: ...`: the victim's memory cgroup and the one out of memory, in the
    /// kernel's words, or why they are unknown.
    fn cgroup_line(&mut self, victim: u32) -> String {
        if let Some(KernelLog::Unreadable(why)) = &self.log {
            return format!("  cgroup: unknown ({why})");
        }
        match self.context(victim) {
            Some(c) => {
                let mut line = format!(
                    "  cgroup: task_memcg={} constraint={}",
                    c.task_memcg.as_deref().unwrap_or("?"),
                    c.constraint
                );
                if let Some(m) = &c.oom_memcg {
                    line.push_str(&format!(" oom_memcg={m}"));
                }
                line
            }
            None => format!(
                "  cgroup: unknown (the kernel logged no oom-kill: line for PID {victim}; \
                 its OOM reports are rate-limited)"
            ),
        }
    }
}

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
        // What only the live system can say: the load, and the kernel log's cgroups (the
        // victim's /proc/PID/cgroup is no longer its cgroup once it is killed).
        if !cx.replay {
            if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
                line.push_str(&format!(", loadavg: {}", load.trim()));
            }
            writeln!(cx.out, "{line}")?;
            let cgroup = self.cgroup_line(u32::try_from(victim).unwrap_or(0));
            writeln!(cx.out, "{cgroup}")?;
        } else {
            writeln!(cx.out, "{line}")?;
        }
        let stack = cx.stack(s);
        writeln!(cx.out, "  Stack trace of PID {pid} (\"{trigger}\"):")?;
        cx.write_stack(stack, s.procs)
    }
}

/// Runs `memperf oomkill`.
pub fn run(cfg: ToolConfig) -> Result<i32> {
    // Each kill is printed with the stack of the task that triggered it.
    let cfg = ToolConfig {
        stacks: true,
        ..cfg
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(cx.out, "Tracing OOM kills... Ctrl-C to stop.")?;
        }
        Ok(())
    };
    // Opened before tracing starts: only the lines of kills after it are read.
    let mut tool = OomKill {
        log: cfg.input.is_none().then(KernelLog::open),
        contexts: HashMap::new(),
    };
    let seen = tool::run("oomkill", &cfg, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("oomkill", &seen);
    Ok(0)
}
