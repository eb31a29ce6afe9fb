//! `memperf mem record` and `memperf mem report`: hardware memory sampling (Intel PEBS
//! mem-loads/mem-stores, AMD IBS, Arm SPE) as perf mem does it, without BPF. `pmu` finds
//! the PMU and builds the events; `report` prints perf mem report's table or `--by`
//! groupings (`place`).

pub mod place;
pub mod pmu;
pub mod report;

use std::path::Path;

use anyhow::{Result, bail};

use crate::cli::mem::{MemRecordConfig, MemReportConfig};

const DEVICES: &str = "/sys/bus/event_source/devices";

/// `memperf mem record`: the events for this machine's PMU, or why there are none.
pub fn record(cfg: MemRecordConfig) -> Result<i32> {
    let Some(found) = pmu::discover(Path::new(DEVICES), cfg.ldlat) else {
        let facts = crate::sys::diagnose::SystemFacts::read();
        bail!(
            "{}",
            crate::sys::diagnose::no_memory_pmu(
                crate::sys::diagnose::in_virtual_machine(),
                facts.pmu_cpu_present
            )
        );
    };
    let events = pmu::events(&found, cfg.types, cfg.ldlat, pmu::kernel_version())
        .map_err(|e| anyhow::anyhow!("cannot sample memory accesses: {e}"))?;
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    bail!(
        "found {} ({}), but opening memory events through the recorder is not wired yet; \
         record with `perf mem record -o {}` and read it with `memperf mem report -i {}`",
        names.join(", "),
        if cfg.types.loads && cfg.types.stores {
            "loads and stores"
        } else if cfg.types.loads {
            "loads"
        } else {
            "stores"
        },
        cfg.output.display(),
        cfg.output.display()
    )
}

/// `memperf mem report`.
pub fn report(cfg: MemReportConfig) -> Result<i32> {
    let file = crate::input::open(&cfg.input)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report::report(&file, &cfg.input.to_string(), cfg.group, &mut out)?;
    std::io::Write::flush(&mut out)?;
    Ok(0)
}
