//! `memperf mem report`: memory samples (PERF_SAMPLE_ADDR, DATA_SRC, WEIGHT) grouped as
//! perf mem report groups them, one table per event: a row per distinct local weight,
//! memory level, function, data address and snoop/TLB/lock/block state, ordered by
//! overhead (the weight, 1 for a sample without one) as perf orders them; or `--by
//! mapping`, the weight by the mapping that holds the data address; or `--by allocation`,
//! by the live allocation holding it (`place`).

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::{Context, Result, bail};
use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use crate::abi::{PERF_SAMPLE_ADDR, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_WEIGHT_STRUCT};
use crate::datasrc::{DataSrc, Weight};
use crate::maps::ProcessMaps;
use crate::perfdata::PerfDataFile;
use crate::session::order::{self, Slack};
use crate::session::{Handler, Keep, Processes, SampleCtx, Session, SideBand};
use crate::symbolize::AddrNames;

use super::place::{self, Place};

/// One sample as it is kept: the event, where its instruction and data were (module path
/// and file offset, at the sample's time), and what the PMU said.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Seen {
    ev: usize,
    kernel: bool,
    ip: u64,
    code: Option<(u32, u64)>,
    addr: u64,
    data: Option<(u32, u64)>,
    weight: u64,
    data_src: u64,
}

/// The handler: counts each distinct sample, and places data addresses.
struct Collect<'p> {
    weight_struct: Vec<bool>,
    seen: FxHashMap<Seen, u64>,
    /// Module paths by the session's module id.
    modules: FxHashMap<u32, Vec<u8>>,
    place: &'p mut dyn Place,
    /// Whether each event's samples are the accesses reported on.
    access: Vec<bool>,
    samples: Vec<u64>,
}

impl Handler for Collect<'_> {
    fn sample(&mut self, c: &SampleCtx<'_>) -> io::Result<()> {
        let s = c.sample;
        if self.place.take(c) || !self.access.get(c.ev).copied().unwrap_or(false) {
            return Ok(());
        }
        let Some(n) = self.samples.get_mut(c.ev) else {
            return Ok(());
        };
        *n += 1;
        let pid = s.pid.unwrap_or(0);
        let maps = c.procs.maps().unwrap_or(ProcessMaps::empty());
        let (ip, addr) = (s.ip.unwrap_or(0), s.addr.unwrap_or(0));
        let kernel =
            u32::from(c.misc) & b::PERF_RECORD_MISC_CPUMODE_MASK == b::PERF_RECORD_MISC_KERNEL;
        let mut module = |found: Option<(u32, u64)>| {
            if let Some((m, _)) = found {
                self.modules
                    .entry(m)
                    .or_insert_with(|| maps.module(m).path.clone());
            }
            found
        };
        let code = module(maps.lookup(pid, ip));
        let data = module(maps.lookup(pid, addr));
        let weight = s.weight.unwrap_or(0);
        let ws = self.weight_struct.get(c.ev).copied().unwrap_or(false);
        self.place
            .sample(c.ev, pid, addr, Weight::of(weight, ws).var1, c.procs);
        *self
            .seen
            .entry(Seen {
                ev: c.ev,
                kernel,
                ip,
                code,
                addr,
                data,
                weight,
                data_src: s.data_src.unwrap_or(0),
            })
            .or_insert(0) += 1;
        Ok(())
    }

    fn wants_unwind(&mut self, _: usize, _: &crate::records::Sample<'_>, _: &Processes) -> bool {
        false
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        self.place.side_band(r);
        Ok(())
    }
}

pub use crate::config::mem::Group;

/// Reads `file` and writes the report to `out`.
pub fn report(file: &PerfDataFile, input: &str, group: Group, out: &mut dyn Write) -> Result<()> {
    if let Some(note) = file.cut_note(input) {
        eprintln!("memperf: warning: {note}");
    }
    let names = file.event_names();
    let has = |i: usize, bit: u64| file.events[i].attr.sample_type & bit != 0;
    let mut allocation = match group {
        Group::Allocation => Some(place::ByAllocation::of_file(file, input)?),
        _ => None,
    };
    let access: Vec<bool> = (0..file.events.len())
        .map(|i| match &allocation {
            // Any sample with a data address: memory samples, page faults.
            Some(a) => has(i, PERF_SAMPLE_ADDR) && a.is_access(i),
            None if group == Group::Mapping => has(i, PERF_SAMPLE_ADDR),
            None => has(i, PERF_SAMPLE_DATA_SRC),
        })
        .collect();
    if !access.contains(&true) {
        if group == Group::Allocation {
            bail!(
                "`{input}` has no samples with a data address beside its allocator calls: none \
                 of its other events ({}) carries PERF_SAMPLE_ADDR",
                names.join(", ")
            );
        }
        if group == Group::Mapping {
            bail!(
                "--by mapping: no event of `{input}` ({}) carries a data address \
                 (PERF_SAMPLE_ADDR)",
                names.join(", ")
            );
        }
        bail!(
            "`{input}` has no memory samples: none of its events ({}) carries a data source \
             (PERF_SAMPLE_DATA_SRC); record with `memperf mem record` or `perf mem record`",
            names.join(", ")
        );
    }
    let mut mapping = place::ByMapping::default();
    let place: &mut dyn Place = match &mut allocation {
        Some(a) => a,
        None => &mut mapping,
    };
    let (seen, modules, samples) = collect(file, place, access)?;
    match group {
        Group::Perf => write_tables(file, &names, &seen, &modules, &samples, out)?,
        Group::Mapping | Group::Allocation => place.write(&names, out)?,
    }
    Ok(())
}

type Collected = (FxHashMap<Seen, u64>, FxHashMap<u32, Vec<u8>>, Vec<u64>);

fn collect(file: &PerfDataFile, place: &mut dyn Place, access: Vec<bool>) -> Result<Collected> {
    let keep = Keep {
        unwind: None,
        maps: Some(ProcessMaps::new(FxHashMap::default())),
        comms: false,
        dsos: false,
    };
    let mut session = Session::for_file(file, keep);
    let mut c = Collect {
        weight_struct: file
            .events
            .iter()
            .map(|e| e.attr.sample_type & PERF_SAMPLE_WEIGHT_STRUCT != 0)
            .collect(),
        seen: FxHashMap::default(),
        modules: FxHashMap::default(),
        place,
        access,
        samples: vec![0; file.events.len()],
    };
    let read = order::replay(file, &mut session, &mut c, Slack::OneRound, &mut |_| {})
        .context("failed to read the records")?;
    if let Some(e) = read.read_error {
        eprintln!("memperf: warning: the records end early: {e}");
    }
    let malformed = session.stats().malformed;
    if malformed > 0 {
        eprintln!("memperf: warning: {malformed} records could not be parsed and were skipped");
    }
    let lost = session.stats().lost + session.stats().lost_samples;
    if lost > 0 {
        eprintln!(
            "memperf: warning: the recording lost {lost} events: samples are missing, and a \
             lost allocator call misplaces the addresses of its block"
        );
    }
    let maps = session.take_maps().unwrap_or_default();
    c.place.finish(&maps);
    Ok((c.seen, c.modules, c.samples))
}

/// One row of perf's table, with what perf compares rows by.
#[derive(Debug, Clone)]
struct Row {
    period: u64,
    samples: u64,
    weight: Weight,
    src: DataSrc,
    sym: String,
    /// What perf tells functions apart by: (module, symbol start) or the address.
    sym_key: (Option<u32>, u64),
    dso: String,
    daddr: u64,
    data_sym: String,
    data_dso: String,
    /// Unresolved names, for perf's column widths.
    sym_resolved: bool,
    data_resolved: bool,
    data_mapped: bool,
    code_mapped: bool,
}

impl Row {
    /// perf's `hist_entry__cmp` over the sort keys (local_weight, mem, sym, dso,
    /// symbol_daddr, dso_daddr, snoop, tlb, locked, blocked, local_ins_lat): the rows
    /// that compare equal are one.
    fn key(&self) -> RowKey {
        let s = self.src;
        (
            self.weight.var1,
            s.lvl(),
            self.sym_key,
            self.dso.clone(),
            self.daddr,
            self.data_dso.clone(),
            (s.snoop(), s.dtlb(), s.lock(), s.blk()),
            self.weight.var2,
        )
    }
}

type RowKey = (
    u64,
    u64,
    (Option<u32>, u64),
    String,
    u64,
    String,
    (u64, u64, u64, u64),
    u16,
);

/// The `[.]`/`[k]` of perf's symbol columns.
fn level(kernel: bool) -> &'static str {
    if kernel { "[k]" } else { "[.]" }
}

fn basename(path: &[u8]) -> String {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    String::from_utf8_lossy(name).into_owned()
}

fn rows_of(
    seen: &FxHashMap<Seen, u64>,
    ev: usize,
    weight_struct: bool,
    modules: &FxHashMap<u32, Vec<u8>>,
    names: &mut AddrNames,
) -> Vec<Row> {
    // The same order every run: perf keeps the first sample's words for a row.
    let ordered: BTreeMap<&Seen, u64> = seen
        .iter()
        .filter(|(s, _)| s.ev == ev)
        .map(|(s, &n)| (s, n))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    let mut at: FxHashMap<RowKey, usize> = FxHashMap::default();
    for (s, n) in ordered {
        let weight = Weight::of(s.weight, weight_struct);
        let lv = level(s.kernel);
        let code = s.code.and_then(|(m, off)| {
            let path = modules.get(&m)?;
            Some((m, path, names.code(path, off)))
        });
        let (sym, sym_key, sym_resolved) = match &code {
            Some((m, _, Some(f))) => (
                format!("{lv} {}", f.name),
                (Some(*m), s.ip - f.offset),
                true,
            ),
            _ => (format!("{lv} {:#018x}", s.ip), (None, s.ip), false),
        };
        let dso = code
            .as_ref()
            .map_or("[unknown]".to_string(), |c| basename(c.1));
        let data = s.data.and_then(|(m, off)| {
            let path = modules.get(&m)?;
            Some((path, names.data(path, off)))
        });
        let (data_sym, data_resolved) = match &data {
            Some((_, Some(d))) => (format!("{lv} {}+{:#x}", d.name, d.offset), true),
            _ => (format!("{lv} {:#018x}", s.addr), false),
        };
        let data_dso = data
            .as_ref()
            .map_or("[unknown]".to_string(), |d| basename(d.0));
        let row = Row {
            period: weight.var1.max(1) * n,
            samples: n,
            weight,
            src: DataSrc(s.data_src),
            sym,
            sym_key,
            dso,
            daddr: s.addr,
            data_sym,
            data_dso,
            sym_resolved,
            data_resolved,
            data_mapped: data.is_some(),
            code_mapped: code.is_some(),
        };
        match at.get(&row.key()) {
            Some(&i) => {
                rows[i].period = rows[i].period.saturating_add(row.period);
                rows[i].samples += row.samples;
            }
            None => {
                at.insert(row.key(), rows.len());
                rows.push(row);
            }
        }
    }
    rows.sort_by(perf_order);
    rows
}

/// perf's output order: overhead first (largest first), then each sort key's own order
/// (its `se_sort`, else its `se_cmp`, as `hist_entry__sort` applies them).
fn perf_order(a: &Row, b: &Row) -> std::cmp::Ordering {
    let (sa, sb) = (a.src, b.src);
    b.period
        .cmp(&a.period)
        .then(b.weight.var1.cmp(&a.weight.var1))
        .then(sa.lvl().cmp(&sb.lvl()))
        .then_with(|| sym_name(a).cmp(sym_name(b)))
        .then_with(|| b.dso.cmp(&a.dso))
        .then(a.daddr.cmp(&b.daddr))
        .then_with(|| b.data_dso.cmp(&a.data_dso))
        .then(sa.snoop().cmp(&sb.snoop()))
        .then(sa.dtlb().cmp(&sb.dtlb()))
        .then(sa.lock().cmp(&sb.lock()))
        .then(sa.blk().cmp(&sb.blk()))
        .then(b.weight.var2.cmp(&a.weight.var2))
}

/// The name perf's `sort__sym_sort` compares (after the level).
fn sym_name(r: &Row) -> &str {
    r.sym.get(4..).unwrap_or("")
}

/// perf's `BITS_PER_LONG / 4`: the width of an unresolved address.
const UNRESOLVED: usize = 16;

/// The columns, with perf's headers, minimum widths and alignment (true: right).
struct Column {
    name: &'static str,
    width: usize,
    right: bool,
}

fn columns(rows: &[Row]) -> Vec<Column> {
    let max = |f: &dyn Fn(&Row) -> usize| rows.iter().map(f).max().unwrap_or(0);
    let col = |name: &'static str, width: usize, right| Column {
        name,
        width: width.max(name.len()),
        right,
    };
    let sym = max(&|r| {
        if r.sym_resolved {
            r.sym.len()
        } else {
            UNRESOLVED + 6
        }
    });
    let data_sym = max(&|r| {
        if r.data_resolved {
            // perf: the symbol's name, 4, an unresolved address and 2.
            let name = r
                .data_sym
                .rfind('+')
                .unwrap_or(r.data_sym.len())
                .saturating_sub(4);
            name + 4 + UNRESOLVED + 2
        } else {
            UNRESOLVED + 6
        }
    });
    let unmapped = |mapped: &dyn Fn(&Row) -> bool| {
        if rows.iter().any(|r| !mapped(r)) {
            UNRESOLVED
        } else {
            0
        }
    };
    let dso = max(&|r| r.dso.len()).max(unmapped(&|r| r.code_mapped));
    let data_dso = max(&|r| r.data_dso.len()).max(unmapped(&|r| r.data_mapped));
    vec![
        col("Overhead", 8, true),
        col("Samples", 12, true),
        col("Local Weight", 12, false),
        col("Memory access", 24, false),
        col("Symbol", sym, false),
        col("Shared Object", dso, false),
        col("Data Symbol", data_sym, false),
        col("Data Object", data_dso, false),
        col("Snoop", 12, false),
        col("TLB access", 22, false),
        col("Locked", 6, false),
        col("Blocked", 10, false),
        col("Local INSTR Latency", 13, false),
    ]
}

fn write_tables(
    file: &PerfDataFile,
    names: &[String],
    seen: &FxHashMap<Seen, u64>,
    modules: &FxHashMap<u32, Vec<u8>>,
    samples: &[u64],
    out: &mut dyn Write,
) -> Result<()> {
    let mut addr_names = AddrNames::default();
    let mut first = true;
    for (ev, name) in names.iter().enumerate() {
        let n = samples.get(ev).copied().unwrap_or(0);
        if n == 0 {
            continue;
        }
        let ws = file
            .events
            .get(ev)
            .is_some_and(|e| e.attr.sample_type & PERF_SAMPLE_WEIGHT_STRUCT != 0);
        let rows = rows_of(seen, ev, ws, modules, &mut addr_names);
        if !first {
            writeln!(out)?;
        }
        first = false;
        write_table(name, n, &rows, out)?;
    }
    Ok(())
}

/// The sort order perf mem report prints (and uses).
const SORT_ORDER: &str = "local_weight,mem,sym,dso,symbol_daddr,dso_daddr,snoop,tlb,locked,blocked,local_ins_lat,local_p_stage_cyc";

fn write_table(name: &str, samples: u64, rows: &[Row], out: &mut dyn Write) -> io::Result<()> {
    let total: u64 = rows.iter().fold(0u64, |t, r| t.saturating_add(r.period));
    writeln!(out, "# Samples: {samples}  of event '{name}'")?;
    writeln!(out, "# Total weight : {total}")?;
    writeln!(out, "# Sort order   : {SORT_ORDER}")?;
    writeln!(out, "#")?;
    let cols = columns(rows);
    let mut head = String::from("# ");
    let mut dots = String::from("# ");
    for (i, c) in cols.iter().enumerate() {
        let sep = if i == 0 { "" } else { "  " };
        let w = c.width;
        if c.right {
            head.push_str(&format!("{sep}{:>w$}", c.name));
        } else {
            head.push_str(&format!("{sep}{:<w$}", c.name));
        }
        dots.push_str(sep);
        dots.push_str(&".".repeat(w));
    }
    writeln!(out, "{head}")?;
    writeln!(out, "{dots}")?;
    writeln!(out, "#")?;
    let mut cell = String::new();
    for r in rows {
        let pct = if total == 0 {
            0.0
        } else {
            100.0 * r.period as f64 / total as f64
        };
        let w = |i: usize| cols[i].width;
        let mut line = format!(
            "  {:>w0$}  {:>w1$}  {:<w2$}  ",
            format!("{pct:.2}%"),
            r.samples,
            r.weight.var1,
            w0 = w(0),
            w1 = w(1),
            w2 = w(2)
        );
        let push = |i: usize, text: &str, line: &mut String| {
            line.push_str(&format!("{text:<w$}", w = cols[i].width));
            if i + 1 < cols.len() {
                line.push_str("  ");
            }
        };
        cell.clear();
        r.src.write_lvl(&mut cell);
        push(3, &cell, &mut line);
        push(4, &r.sym, &mut line);
        push(5, &r.dso, &mut line);
        push(6, &r.data_sym, &mut line);
        push(7, &r.data_dso, &mut line);
        for (i, write) in [
            (8, DataSrc::write_snoop as fn(DataSrc, &mut String)),
            (9, DataSrc::write_tlb),
            (10, DataSrc::write_lock),
            (11, DataSrc::write_blk),
        ] {
            cell.clear();
            write(r.src, &mut cell);
            push(i, &cell, &mut line);
        }
        push(12, &r.weight.var2.to_string(), &mut line);
        writeln!(out, "{line}")?;
    }
    Ok(())
}
