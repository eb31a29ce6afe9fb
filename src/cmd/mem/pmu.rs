//! The PMU that samples memory accesses, found through sysfs (`/sys/bus/event_source/
//! devices`) as perf finds it, and the attrs `memperf mem record` opens on it:
//! - Intel PEBS: `cpu` (or `cpu_core` on hybrid CPUs) with `events/mem-loads` and
//!   `events/mem-stores`; loads as `cpu/mem-loads,ldlat=N/P`, led by `mem-loads-aux` where
//!   the CPU has it (Sapphire Rapids and later: the load-latency event needs that group
//!   leader), stores as `cpu/mem-stores/P`;
//! - AMD IBS: `ibs_op`, one event for loads and stores (`ibs_op//`);
//! - Arm SPE: `arm_spe_0`, whose records come through an AUX area.

use std::path::Path;

use crate::abi::*;

/// A PMU event as sysfs spells it: the PMU's type and the attr's config words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PmuEvent {
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
}

/// The memory-sampling PMU found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemPmu {
    Intel {
        pmu: String,
        loads: Option<PmuEvent>,
        stores: Option<PmuEvent>,
        /// `mem-loads-aux`, the group leader the load-latency event needs on some CPUs.
        loads_aux: Option<PmuEvent>,
    },
    Amd {
        ibs_op: PmuEvent,
    },
    Arm {
        pmu: String,
        spe: PmuEvent,
    },
}

/// Looks through `devices` (`/sys/bus/event_source/devices`) for a memory-sampling PMU.
/// `ldlat` goes in the load event's `ldlat` term (a load slower than it is sampled).
pub fn discover(devices: &Path, ldlat: u32) -> Option<MemPmu> {
    for pmu in ["cpu", "cpu_core"] {
        let dir = devices.join(pmu);
        let event = |name: &str, extra: &[(&str, u64)]| {
            let text = std::fs::read_to_string(dir.join("events").join(name)).ok()?;
            encode(&dir, text.trim(), extra)
        };
        let loads = event("mem-loads", &[("ldlat", u64::from(ldlat))]);
        let stores = event("mem-stores", &[]);
        if loads.is_some() || stores.is_some() {
            return Some(MemPmu::Intel {
                pmu: pmu.to_string(),
                loads,
                stores,
                loads_aux: event("mem-loads-aux", &[]),
            });
        }
    }
    if let Some(type_) = pmu_type(&devices.join("ibs_op")) {
        return Some(MemPmu::Amd {
            ibs_op: PmuEvent {
                type_,
                ..PmuEvent::default()
            },
        });
    }
    let mut spe: Vec<String> = std::fs::read_dir(devices)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("arm_spe"))
        .collect();
    spe.sort();
    let pmu = spe.into_iter().next()?;
    let type_ = pmu_type(&devices.join(&pmu))?;
    Some(MemPmu::Arm {
        pmu,
        spe: PmuEvent {
            type_,
            ..PmuEvent::default()
        },
    })
}

fn pmu_type(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("type"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Encodes an event's sysfs terms (`event=0xcd,umask=0x1,ldlat=3`), with `extra` terms
/// replacing its own, through the PMU's `format/` files (`config:0-7`, `config1:0-15`).
fn encode(pmu: &Path, terms: &str, extra: &[(&str, u64)]) -> Option<PmuEvent> {
    let mut ev = PmuEvent {
        type_: pmu_type(pmu)?,
        ..PmuEvent::default()
    };
    let mut all: Vec<(String, u64)> = Vec::new();
    for term in terms.split(',').filter(|t| !t.is_empty()) {
        let (name, value) = term.split_once('=').unwrap_or((term, "1"));
        all.push((name.trim().to_string(), parse_number(value.trim())?));
    }
    for (name, value) in extra {
        all.retain(|(n, _)| n != name);
        all.push((name.to_string(), *value));
    }
    for (name, value) in all {
        let format = std::fs::read_to_string(pmu.join("format").join(&name)).ok()?;
        place_bits(&mut ev, format.trim(), value)?;
    }
    Some(ev)
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Puts `value` into the bits a format names (`config:0-7,21`, `config1:0-15`), lowest
/// value bits into the first range.
fn place_bits(ev: &mut PmuEvent, format: &str, mut value: u64) -> Option<()> {
    let (field, ranges) = format.split_once(':')?;
    let word = match field {
        "config" => &mut ev.config,
        "config1" => &mut ev.config1,
        "config2" => &mut ev.config2,
        _ => return None,
    };
    for range in ranges.split(',') {
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
            None => {
                let b = range.parse::<u32>().ok()?;
                (b, b)
            }
        };
        if hi < lo || hi > 63 {
            return None;
        }
        let width = hi - lo + 1;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1 << width) - 1
        };
        *word |= (value & mask) << lo;
        value = value.checked_shr(width).unwrap_or(0);
    }
    Some(())
}

pub use crate::config::mem::Types;

/// One event to open: its name (perf's spelling), the attr fields that make it a memory
/// event, and whether it only leads a group (`mem-loads-aux`: opened, never sampled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemEvent {
    pub name: String,
    pub event: PmuEvent,
    pub precise_ip: u8,
    pub sample_type: u64,
    pub group_leader_only: bool,
    /// The next event is in this one's group.
    pub leads_next: bool,
}

/// The sample fields a memory event asks for on a kernel of version `kernel` (major,
/// minor): the data address and source (3.10), WEIGHT_STRUCT (5.12, else WEIGHT),
/// PHYS_ADDR (4.14) and DATA_PAGE_SIZE (5.11).
pub fn sample_type(kernel: (u32, u32)) -> u64 {
    let mut t = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ADDR
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_DATA_SRC;
    t |= if kernel >= (5, 12) {
        PERF_SAMPLE_WEIGHT_STRUCT
    } else {
        PERF_SAMPLE_WEIGHT
    };
    if kernel >= (4, 14) {
        t |= PERF_SAMPLE_PHYS_ADDR;
    }
    if kernel >= (5, 11) {
        t |= PERF_SAMPLE_DATA_PAGE_SIZE;
    }
    t
}

/// The events `mem record` opens on `pmu` for `types`; an error names what is missing.
pub fn events(
    pmu: &MemPmu,
    types: Types,
    ldlat: u32,
    kernel: (u32, u32),
) -> Result<Vec<MemEvent>, String> {
    let st = sample_type(kernel);
    let ev = |name: String, event: PmuEvent, precise_ip| MemEvent {
        name,
        event,
        precise_ip,
        sample_type: st,
        group_leader_only: false,
        leads_next: false,
    };
    match pmu {
        MemPmu::Intel {
            pmu,
            loads,
            stores,
            loads_aux,
        } => {
            let mut out = Vec::new();
            if types.loads {
                let loads = loads.ok_or(format!("the `{pmu}` PMU has no mem-loads event"))?;
                if let Some(aux) = loads_aux {
                    out.push(MemEvent {
                        group_leader_only: true,
                        leads_next: true,
                        ..ev(format!("{pmu}/mem-loads-aux/"), *aux, 3)
                    });
                }
                out.push(ev(format!("{pmu}/mem-loads,ldlat={ldlat}/P"), loads, 3));
            }
            if types.stores {
                let stores = stores.ok_or(format!("the `{pmu}` PMU has no mem-stores event"))?;
                out.push(ev(format!("{pmu}/mem-stores/P"), stores, 3));
            }
            Ok(out)
        }
        // IBS samples loads and stores alike; report splits them by the data source.
        MemPmu::Amd { ibs_op } => Ok(vec![ev("ibs_op//".to_string(), *ibs_op, 0)]),
        MemPmu::Arm { pmu, .. } => Err(format!(
            "`{pmu}` (Arm SPE) delivers its samples through an AUX area trace, which memperf \
             does not decode yet; `perf mem record` does"
        )),
    }
}

/// The running kernel's (major, minor), from uname's release.
pub fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

#[cfg(test)]
mod tests;
