//! `memperf script`: each sample as perf script prints it, a header line (command, pid/tid,
//! cpu, time, period, event, tracepoint payload) and one line per frame.

use std::io::{self, Write};

use anyhow::Result;
use perf_event_open_sys::bindings as b;

use rustc_hash::FxHashMap;

use crate::abi::PERF_SAMPLE_WEIGHT_STRUCT;
use crate::config::report::ScriptField;
use crate::datasrc::{DataSrc, Weight};
use crate::perfdata::PerfDataFile;
use crate::perfdata::tracing_data::{EventFormat, parse_printk_formats};
use crate::stacks::FrameId;
use crate::symbolize::Kallsyms;

use super::{Resolved, Resolver};
use crate::aggregate::{Aggregate, RowSink, ScriptRow};
use crate::maps::ProcessMaps;
use crate::printfmt::{Kernel, PrintFmt, PrintFmtError};
use crate::session::Processes;

/// What `memperf script` prints from: the fields asked for and the file's events.
pub struct ScriptInput<'a> {
    pub fields: &'a [ScriptField],
    pub file: &'a PerfDataFile,
    pub names: &'a [String],
    /// Names `%pS` call sites in payloads, as perf names them from the running kernel.
    pub kallsyms: Option<&'a Kallsyms>,
}

/// The file's tracepoint formats and printk strings, read once for the whole output.
pub struct ScriptTables {
    formats: Vec<EventFormat>,
    printk: FxHashMap<u64, String>,
}

impl ScriptTables {
    pub fn new(file: &PerfDataFile) -> ScriptTables {
        let tracing_data = file.features.tracing_data.as_deref();
        ScriptTables {
            formats: crate::aggregate::weigh::event_formats(file),
            printk: tracing_data
                .map(parse_printk_formats)
                .unwrap_or_default()
                .into_iter()
                .collect(),
        }
    }
}

/// Prints each kept sample as it is read: a header line and one line per frame, naming
/// the frames it has not met before. Memory holds the names of unique frames, not samples.
pub struct ScriptWriter<'a> {
    input: ScriptInput<'a>,
    kernel: Kernel<'a>,
    payloads: Vec<Option<Payload<'a>>>,
    layout: Layout,
    resolver: Resolver,
    out: Box<dyn Write + 'a>,
    ids: Vec<FrameId>,
    line: Vec<u8>,
    /// The longest data source printed so far: perf pads each to it.
    data_src_width: usize,
}

impl<'a> ScriptWriter<'a> {
    pub fn new(
        input: ScriptInput<'a>,
        tables: &'a ScriptTables,
        resolver: Resolver,
        out: Box<dyn Write + 'a>,
    ) -> ScriptWriter<'a> {
        let has = |f: ScriptField| input.fields.contains(&f);
        let want_frames = has(ScriptField::Ip) || has(ScriptField::Sym) || has(ScriptField::Dso);
        let payloads = input
            .file
            .events
            .iter()
            .map(|desc| {
                let tracepoint = desc.attr.type_ == b::PERF_TYPE_TRACEPOINT;
                let format = tables.formats.iter().find(|f| f.id == desc.attr.config);
                format.filter(|_| tracepoint).map(Payload::new)
            })
            .collect();
        let layout = Layout {
            want_frames,
            // perf right-aligns event names to the longest one in the file.
            name_width: input.names.iter().map(String::len).max().unwrap_or(0),
        };
        ScriptWriter {
            kernel: Kernel {
                kallsyms: input.kallsyms,
                printk: Some(&tables.printk),
            },
            input,
            payloads,
            layout,
            resolver,
            out,
            ids: Vec::new(),
            line: Vec::new(),
            data_src_width: 0,
        }
    }

    /// Flushes the output; returns a note for each event whose payloads (some or all)
    /// could not be printed as perf prints them.
    pub fn finish(mut self) -> Result<Vec<String>> {
        self.out.flush()?;
        let notes = self
            .payloads
            .iter()
            .zip(self.input.names)
            .filter_map(|(p, name)| {
                let p = p.as_ref()?;
                let why = p.why.as_ref()?;
                Some(format!(
                    "{name}: {} payloads printed as name=0xvalue fields, not as perf prints them: {why}",
                    p.raw_fields
                ))
            })
            .collect();
        Ok(notes)
    }
}

impl RowSink for ScriptWriter<'_> {
    fn row(&mut self, row: &ScriptRow<'_>, agg: &Aggregate, procs: &Processes) -> io::Result<()> {
        let has = |f: ScriptField| self.input.fields.contains(&f);
        self.line.clear();
        write_header(&self.input, self.layout, agg, row, &mut self.line)?;
        // perf keeps the data source's padding at the end of a line.
        let memory_end = write_memory(&self.input, row, &mut self.data_src_width, &mut self.line)?;
        // A sample without raw data (no PERF_SAMPLE_RAW) has no payload, as with perf.
        let printed = has(ScriptField::Trace)
            && !row.raw.is_empty()
            && match self.payloads.get_mut(row.ev).and_then(Option::as_mut) {
                Some(p) => p.write(row.raw, self.kernel, &mut self.line),
                None => false,
            };
        // perf's payload is printed as it is; otherwise a header that ends in the event
        // keeps its blank, as perf's does.
        let keep = if printed || self.line.ends_with(b": ") {
            self.line.len()
        } else {
            self.line.trim_ascii_end().len().max(memory_end)
        };
        self.line.truncate(keep);
        self.line.push(b'\n');
        if !self.layout.want_frames {
            self.out.write_all(&self.line)?;
            return Ok(());
        }
        self.ids.clear();
        if let Some(stack) = row.stack {
            agg.book.stacks.frames(stack, &mut self.ids);
        }
        let maps = procs.maps().unwrap_or(ProcessMaps::empty());
        let res = self.resolver.catch_up(&agg.book.frames, maps);
        // Root first: the frames before the mark were read from the live process. The
        // sample's lines stay as perf prints them (inferno and stackcollapse-perf.pl parse
        // them strictly and pass over comments): a comment line before it says how many of
        // its last frames were recovered.
        if let Some(n) = self
            .ids
            .iter()
            .position(|&id| Some(id) == res.recovered_mark)
        {
            writeln!(
                self.out,
                "# {} the last {n} frames of the next sample were read from the live process",
                super::RECOVERED
            )?;
        }
        self.out.write_all(&self.line)?;
        write_frames(self.input.fields, &self.ids, res, &mut self.out)?;
        Ok(())
    }
}

/// How one tracepoint event's payloads print: through its print fmt, parsed once, else as
/// `name=0xvalue` fields.
struct Payload<'a> {
    format: &'a EventFormat,
    print: Result<PrintFmt, PrintFmtError>,
    /// Payloads printed as raw fields, and why the first one was.
    raw_fields: u64,
    why: Option<PrintFmtError>,
}

impl Payload<'_> {
    fn new(format: &EventFormat) -> Payload<'_> {
        let print = if format.print_fmt.is_empty() {
            Err(PrintFmtError::Missing)
        } else {
            PrintFmt::parse(&format.print_fmt, &format.fields)
        };
        Payload {
            format,
            print,
            raw_fields: 0,
            why: None,
        }
    }

    /// Appends the payload of `raw`; true if it went through the print fmt. Otherwise the
    /// whole payload is raw fields, so a line is never partly perf's.
    fn write(&mut self, raw: &[u8], kernel: Kernel<'_>, line: &mut Vec<u8>) -> bool {
        let error = match &self.print {
            Ok(pf) => match pf.render(raw, kernel, line) {
                Ok(()) => return true,
                Err(e) => Some(e),
            },
            Err(_) => None,
        };
        self.raw_fields += 1;
        if self.why.is_none() {
            self.why = error.or_else(|| self.print.as_ref().err().cloned());
        }
        let fields = self.format.fields.iter();
        for field in fields.filter(|x| !x.name.starts_with("common_")) {
            if let Some(v) = field.read(raw) {
                // Writing to a Vec cannot fail.
                let _ = write!(line, "{}=0x{v:x} ", field.name);
            }
        }
        false
    }
}

/// What shapes every header line alike, found once per file.
#[derive(Clone, Copy)]
struct Layout {
    /// Frame lines follow the header.
    want_frames: bool,
    /// The longest event name.
    name_width: usize,
}

/// The header up to the payload, in perf's layout: each field followed by a blank.
fn write_header(
    input: &ScriptInput<'_>,
    layout: Layout,
    agg: &Aggregate,
    row: &ScriptRow<'_>,
    line: &mut Vec<u8>,
) -> std::io::Result<()> {
    let has = |f: ScriptField| input.fields.contains(&f);
    if has(ScriptField::Comm) {
        let comm = agg.prefixes.get(row.comm).map_or("", String::as_str);
        // Unpadded above frames, as perf prints it: collapsers take a line that starts
        // with a non-blank character as a sample header.
        if layout.want_frames {
            write!(line, "{comm} ")?;
        } else {
            write!(line, "{comm:>16} ")?;
        }
    }
    match (has(ScriptField::Pid), has(ScriptField::Tid)) {
        (true, true) => write!(line, "{:>5}/{:<5} ", row.pid, row.tid)?,
        (true, false) => write!(line, "{:>5} ", row.pid)?,
        (false, true) => write!(line, "{:>5} ", row.tid)?,
        (false, false) => {}
    }
    if has(ScriptField::Cpu) {
        write!(line, "[{:03}] ", row.cpu.unwrap_or(0))?;
    }
    if has(ScriptField::Time) {
        let t = row.time.unwrap_or(0);
        write!(
            line,
            "{:>5}.{:06}: ",
            t / 1_000_000_000,
            t % 1_000_000_000 / 1000
        )?;
    }
    let desc = &input.file.events[row.ev];
    let tracepoint = desc.attr.type_ == b::PERF_TYPE_TRACEPOINT;
    if has(ScriptField::Period) && !tracepoint {
        write!(line, "{:>10} ", row.period.unwrap_or(1))?;
    }
    if has(ScriptField::Event) {
        let width = layout.name_width;
        write!(line, "{:>width$}: ", input.names[row.ev])?;
    }
    if has(ScriptField::Addr) {
        write!(line, "{:16x} ", row.addr.unwrap_or(0))?;
    }
    Ok(())
}

/// The memory fields after the address, as perf script prints them: the data source in hex
/// and decoded, padded to the longest printed so far (perf's 100-byte buffer cuts it at 99
/// characters), then the weight and the instruction latency in 16 columns each. Returns
/// where they end in the line (0 when none is printed).
fn write_memory(
    input: &ScriptInput<'_>,
    row: &ScriptRow<'_>,
    width: &mut usize,
    line: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let has = |f: ScriptField| input.fields.contains(&f);
    let memory = [
        ScriptField::DataSrc,
        ScriptField::Weight,
        ScriptField::InsLat,
    ];
    if !memory.iter().any(|&f| has(f)) {
        return Ok(0);
    }
    // perf prints them right after the address, without its blank.
    if has(ScriptField::Addr) && line.last() == Some(&b' ') {
        line.pop();
    }
    if has(ScriptField::DataSrc) {
        let v = row.data_src.unwrap_or(0);
        let mut text = format!("{v:16x} ");
        DataSrc(v).write_all(&mut text);
        text.truncate(PERF_SCRIPT_DATA_SRC_MAX);
        *width = (*width).max(text.len());
        write!(line, "{text:<w$}", w = *width)?;
    }
    let weight_struct = input.file.events[row.ev].attr.sample_type & PERF_SAMPLE_WEIGHT_STRUCT != 0;
    let weight = Weight::of(row.weight.unwrap_or(0), weight_struct);
    if has(ScriptField::Weight) {
        write!(line, "{:16}", weight.var1)?;
    }
    if has(ScriptField::InsLat) {
        write!(line, "{:16}", weight.var2)?;
    }
    let end = line.len();
    line.push(b' ');
    Ok(end)
}

/// What perf script's data source text holds at most (`char out[100]`).
const PERF_SCRIPT_DATA_SRC_MAX: usize = 99;

/// One line per frame, leaf first, then a blank line.
fn write_frames(
    fields: &[ScriptField],
    ids: &[FrameId],
    res: &Resolved,
    out: &mut dyn Write,
) -> io::Result<()> {
    let has = |f: ScriptField| fields.contains(&f);
    // Written straight to the buffered output: no string per frame.
    for &id in ids.iter().rev() {
        if Some(id) == res.recovered_mark {
            continue;
        }
        let fi = &res.info[id as usize];
        out.write_all(b"\t")?;
        if has(ScriptField::Ip) {
            write!(out, "{:>16x}", fi.addr)?;
        }
        if has(ScriptField::Sym) {
            write!(out, " {}", fi.sym.as_deref().unwrap_or("[unknown]"))?;
            if has(ScriptField::Symoff)
                && let (Some(_), Some(off)) = (&fi.sym, fi.off)
            {
                write!(out, "+0x{off:x}")?;
            }
        }
        if has(ScriptField::Dso) {
            write!(out, " ({})", fi.dso)?;
        }
        out.write_all(b"\n")?;
    }
    writeln!(out)?;
    Ok(())
}
