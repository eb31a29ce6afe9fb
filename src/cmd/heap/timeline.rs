//! The timeline: live heap bytes (from every allocator call), resident and mapped memory
//! (the process's VmRSS and VmSize, read at each tick) over time, as an SVG a browser shows,
//! with the peak marked, and as CSV.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::allocs::heap::HeapTracker;

use crate::output::human_bytes;

/// One reading of the process's memory (bytes), at a sample-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub time: u64,
    pub resident: u64,
    pub mapped: u64,
}

/// VmRSS and VmSize of `pid`, in bytes.
pub fn read_memory(pid: u32, time: u64) -> Option<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    };
    Some(Memory {
        time,
        resident: kib("VmRSS:")? * 1024,
        mapped: kib("VmSize:")? * 1024,
    })
}

/// The CSV: one row per time either series has a point, the other's cells empty.
pub fn write_csv(path: &Path, heap: &HeapTracker, memory: &[Memory]) -> Result<()> {
    let t0 = heap.first_time.unwrap_or(0);
    let mut rows: Vec<(u64, Option<u64>, Option<Memory>)> = heap
        .changes()
        .into_iter()
        .map(|(time, live)| (time, Some(live), None))
        .chain(memory.iter().map(|m| (m.time, None, Some(*m))))
        .collect();
    rows.sort_by_key(|r| r.0);
    let mut out = String::from("seconds,live_heap_bytes,resident_bytes,mapped_bytes\n");
    for (time, live, mem) in rows {
        let cell = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        let _ = writeln!(
            out,
            "{:.6},{},{},{}",
            time.saturating_sub(t0) as f64 / 1e9,
            cell(live),
            cell(mem.map(|m| m.resident)),
            cell(mem.map(|m| m.mapped)),
        );
    }
    write_file(path, out.as_bytes())
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    if path == Path::new("-") {
        std::io::stdout().lock().write_all(bytes)?;
        return Ok(());
    }
    let mut f = crate::output::create_output_file(path)
        .with_context(|| format!("failed to create `{}`", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(())
}

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 50.0;

/// The plot's scales: seconds and bytes to pixels.
struct Scale {
    t0: u64,
    span: f64,
    top: f64,
}

impl Scale {
    fn x(&self, time: u64) -> f64 {
        LEFT + (time.saturating_sub(self.t0) as f64 / self.span) * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, bytes: u64) -> f64 {
        HEIGHT - BOTTOM - (bytes as f64 / self.top) * (HEIGHT - TOP - BOTTOM)
    }
}

fn polyline(points: &[(u64, u64)], s: &Scale, color: &str, id: &str) -> String {
    let mut d = String::new();
    for (i, &(t, v)) in points.iter().enumerate() {
        let _ = write!(
            d,
            "{}{:.1},{:.1}",
            if i == 0 { "" } else { " " },
            s.x(t),
            s.y(v)
        );
    }
    format!(
        "<polyline id=\"{id}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" \
         points=\"{d}\"/>\n"
    )
}

/// Live heap bytes as steps: each value holds until the next change (a line straight from
/// one to the next would draw bytes that were never live), the last until `end`.
fn steps(changes: &[(u64, u64)], end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(changes.len() * 2 + 1);
    for &(t, v) in changes {
        if let Some(&(_, before)) = out.last() {
            out.push((t, before));
        }
        out.push((t, v));
    }
    if let Some(&(t, v)) = out.last()
        && end > t
    {
        out.push((end, v));
    }
    out
}

/// The peak marker's colour: apart from the three lines', so that it stands out from the
/// live heap's line it sits on.
const PEAK_COLOR: &str = "#7b2cbf";

/// The SVG: three lines, axes, a legend, and the peak marked where it happened.
pub fn write_svg(path: &Path, title: &str, heap: &HeapTracker, memory: &[Memory]) -> Result<()> {
    let t0 = heap.first_time.unwrap_or(0);
    let end = memory
        .iter()
        .map(|m| m.time)
        .chain([heap.last_time])
        .max()
        .unwrap_or(t0);
    let top = memory
        .iter()
        .map(|m| m.resident.max(m.mapped))
        .chain([heap.peak_bytes])
        .max()
        .unwrap_or(1)
        .max(1);
    let s = Scale {
        t0,
        span: (end.saturating_sub(t0) as f64).max(1.0),
        top: top as f64 * 1.05,
    };
    let mut svg = format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n<svg version=\"1.1\" \
         xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"Verdana\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
        WIDTH / 2.0,
        xml_escape(title)
    );
    axes(&mut svg, &s, end);
    let live = steps(&heap.changes(), end);
    let resident: Vec<(u64, u64)> = memory.iter().map(|m| (m.time, m.resident)).collect();
    let mapped: Vec<(u64, u64)> = memory.iter().map(|m| (m.time, m.mapped)).collect();
    svg.push_str(&polyline(&mapped, &s, "#999999", "mapped"));
    svg.push_str(&polyline(&resident, &s, "#1f77b4", "resident"));
    svg.push_str(&polyline(&live, &s, "#d62728", "live-heap"));
    let (px, py) = (s.x(heap.peak_time), s.y(heap.peak_bytes));
    let _ = write!(
        svg,
        "<g id=\"peak\"><line x1=\"{px:.1}\" y1=\"{TOP}\" x2=\"{px:.1}\" y2=\"{:.1}\" \
         stroke=\"{PEAK_COLOR}\" stroke-dasharray=\"4,3\"/>\n<circle cx=\"{px:.1}\" \
         cy=\"{py:.1}\" r=\"5\" fill=\"{PEAK_COLOR}\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" \
         fill=\"{PEAK_COLOR}\">peak {} at \
         {:.3} s</text></g>\n",
        HEIGHT - BOTTOM,
        (px + 8.0).min(WIDTH - 200.0),
        (py - 8.0).max(TOP + 12.0),
        human_bytes(heap.peak_bytes),
        heap.peak_time.saturating_sub(t0) as f64 / 1e9,
    );
    legend(&mut svg, memory.is_empty());
    svg.push_str("</svg>\n");
    write_file(path, svg.as_bytes())
}

fn axes(svg: &mut String, s: &Scale, end: u64) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    let _ = write!(
        svg,
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/>\n\
         <line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\" stroke=\"black\"/>\n"
    );
    for i in 0..=4u64 {
        let bytes = (s.top * i as f64 / 4.0) as u64;
        let y = s.y(bytes);
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 6.0,
            y + 4.0,
            human_bytes(bytes)
        );
        let t = s.t0 + (end.saturating_sub(s.t0)) * i / 4;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.2} s</text>",
            s.x(t),
            y0 + 18.0,
            t.saturating_sub(s.t0) as f64 / 1e9
        );
    }
}

fn legend(svg: &mut String, no_memory: bool) {
    let items: &[(&str, &str)] = if no_memory {
        &[("#d62728", "live heap (allocated - freed)")]
    } else {
        &[
            ("#d62728", "live heap (allocated - freed)"),
            ("#1f77b4", "resident (VmRSS)"),
            ("#999999", "mapped (VmSize)"),
        ]
    };
    for (i, (color, label)) in items.iter().enumerate() {
        let y = HEIGHT - 12.0;
        let x = LEFT + i as f64 * 260.0;
        let _ = write!(
            svg,
            "<rect x=\"{x}\" y=\"{:.1}\" width=\"12\" height=\"4\" fill=\"{color}\"/>\n\
             <text x=\"{:.1}\" y=\"{y:.1}\">{label}</text>\n",
            y - 6.0,
            x + 16.0
        );
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_heap_is_drawn_as_steps_held_to_the_end() {
        assert_eq!(
            steps(&[(0, 10), (5, 30), (6, 20)], 9),
            vec![(0, 10), (5, 10), (5, 30), (6, 30), (6, 20), (9, 20)]
        );
        assert_eq!(steps(&[], 9), vec![]);
    }
}
