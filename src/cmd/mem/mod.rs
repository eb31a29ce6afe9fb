//! `memperf mem record` and `memperf mem report`: hardware memory sampling (Intel PEBS
//! mem-loads/mem-stores, AMD IBS, Arm SPE) as perf mem does it, without BPF. `pmu` finds
//! the PMU and builds the events; `report` prints perf mem report's table or `--by`
//! groupings (`place`).

pub mod place;
pub mod pmu;
pub mod record;
pub mod report;

use anyhow::Result;

use crate::config::mem::MemReportConfig;

pub use record::record;

/// `memperf mem report`.
pub fn report(cfg: MemReportConfig) -> Result<i32> {
    let file = crate::input::open(&cfg.input)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    report::report(&file, &cfg.input.to_string(), cfg.group, &mut out)?;
    std::io::Write::flush(&mut out)?;
    Ok(0)
}
