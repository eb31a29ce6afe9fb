//! perf stat's layouts: the final table, interval lines, per-CPU prefixes, CSV, and the
//! spread of repeated runs, column for column as perf 6.x prints them.

use std::fmt::Write as _;

/// One line of counts: an event, summed over its CPUs or for one CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub event: String,
    /// Counted in nanoseconds and printed in msec (task-clock, cpu-clock).
    pub clock: bool,
    pub count: Count,
    /// Time the counter was enabled and running (ns): multiplexed counters ran part of
    /// the time and their counts are scaled.
    pub enabled: u64,
    pub running: u64,
    /// `-r`: the spread of the runs' counts, in percent of their mean.
    pub noise: Option<f64>,
    /// What perf prints after `#`: the first beside the count, any other on a line of
    /// its own.
    pub metrics: Vec<Metric>,
    pub cpu: Option<u32>,
}

/// A count, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Count {
    /// Scaled to the time enabled when the counter was multiplexed.
    Value(f64),
    /// The counter never ran (its targets were gone).
    NotCounted,
    /// The kernel cannot count it here (no PMU).
    NotSupported,
}

/// A derived value: its number, its unit as text shows it, and the CSV's.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub value: f64,
    pub unit: String,
    /// The value and unit in CSV (exact bytes rather than scaled MiB).
    pub csv: (String, String),
}

impl Metric {
    /// A rate of events per second of task clock, scaled as perf scales it.
    pub fn rate(per_sec: f64) -> Metric {
        let (value, unit) = if per_sec >= 1e9 {
            (per_sec / 1e9, "G/sec")
        } else if per_sec >= 1e6 {
            (per_sec / 1e6, "M/sec")
        } else if per_sec >= 1e3 {
            (per_sec / 1e3, "K/sec")
        } else {
            (per_sec, "/sec")
        };
        Metric {
            value,
            unit: unit.to_string(),
            csv: (format!("{value:.3}"), unit.to_string()),
        }
    }

    /// Task clock over wall time.
    pub fn cpus_utilized(ratio: f64) -> Metric {
        Metric {
            value: ratio,
            unit: "CPUs utilized".to_string(),
            csv: (format!("{ratio:.3}"), "CPUs utilized".to_string()),
        }
    }

    /// Bytes summed from the samples' fields, in binary units, labelled by what they are.
    pub fn bytes(bytes: f64, label: &str) -> Metric {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut value = bytes;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        Metric {
            value,
            unit: format!("{} {label}", UNITS[unit]),
            csv: (format!("{bytes:.0}"), format!("bytes {label}")),
        }
    }
}

/// Where the lines go and how they look.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// `-x SEP`.
    pub separator: Option<String>,
    pub per_cpu: bool,
}

/// perf's header above interval lines (every 25 intervals; never in CSV).
pub fn interval_header(layout: &Layout) -> Option<String> {
    if layout.separator.is_some() {
        return None;
    }
    Some(if layout.per_cpu {
        "#           time CPU                    counts unit events\n".to_string()
    } else {
        "#           time             counts unit events\n".to_string()
    })
}

/// The time column of an interval line: seconds since the start, to the nanosecond.
pub fn interval_time(ns: u64) -> String {
    format!("{:6}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// One line (and the lines of its further metrics), with the interval's time first when
/// there is one.
pub fn line(layout: &Layout, time: Option<u64>, l: &Line) -> String {
    match &layout.separator {
        Some(sep) => csv_line(sep, time, l),
        None => text_line(time, l),
    }
}

/// The count as both layouts print it: msec for a clock, else whole events.
fn count_text(l: &Line) -> String {
    match l.count {
        Count::NotCounted => "<not counted>".to_string(),
        Count::NotSupported => "<not supported>".to_string(),
        Count::Value(v) if l.clock => format!("{:.2}", v / 1e6),
        Count::Value(v) => format!("{v:.0}"),
    }
}

fn text_line(time: Option<u64>, l: &Line) -> String {
    let mut prefix = String::new();
    if let Some(t) = time {
        prefix.push_str(&interval_time(t));
        prefix.push(' ');
    }
    if let Some(cpu) = l.cpu {
        let _ = write!(prefix, "CPU{cpu:<8}");
    }
    let unit = if l.clock { "msec" } else { "" };
    let mut s = format!("{prefix}{:>18} {unit:<4} {:<32}", count_text(l), l.event);
    let counted = matches!(l.count, Count::Value(_));
    match l.metrics.first().filter(|_| counted) {
        Some(m) => {
            let _ = write!(s, " # {:8.3} {:<23}", m.value, m.unit);
        }
        None if counted => s.push_str(&" ".repeat(35)),
        // perf pads a line without a count less.
        None => s.push_str(&" ".repeat(28)),
    }
    if let Some(pct) = l.noise.filter(|p| *p != 0.0) {
        let _ = write!(s, "  ( +-{pct:6.2}% )");
    }
    if counted && l.running > 0 && l.running < l.enabled {
        let _ = write!(s, "  ({:.2}%)", 100.0 * l.running as f64 / l.enabled as f64);
    }
    s.push('\n');
    if counted {
        for m in l.metrics.iter().skip(1) {
            let indent = prefix.len() + 18 + 1 + 4 + 1 + 32 + 1;
            let _ = writeln!(
                s,
                "{:indent$}# {:8.3} {:<23}",
                "",
                m.value,
                m.unit,
                indent = indent
            );
        }
    }
    s
}

fn csv_line(sep: &str, time: Option<u64>, l: &Line) -> String {
    let mut s = String::new();
    if let Some(t) = time {
        s.push_str(&interval_time(t));
        s.push_str(sep);
    }
    if let Some(cpu) = l.cpu {
        let _ = write!(s, "CPU{cpu}{sep}");
    }
    let unit = if l.clock { "msec" } else { "" };
    let _ = write!(s, "{}{sep}{unit}{sep}{}", count_text(l), l.event);
    if let Some(pct) = l.noise {
        let _ = write!(s, "{sep}{pct:.2}%");
    }
    let pct = match l.count {
        // As perf: a line without a count says 100.00.
        Count::NotCounted | Count::NotSupported => 100.0,
        Count::Value(_) if l.enabled > 0 => 100.0 * l.running as f64 / l.enabled as f64,
        Count::Value(_) => 0.0,
    };
    let _ = write!(s, "{sep}{}{sep}{pct:.2}", l.running);
    let counted = matches!(l.count, Count::Value(_));
    match l.metrics.first().filter(|_| counted) {
        Some(m) => {
            let _ = write!(s, "{sep}{}{sep}{}", m.csv.0, m.csv.1);
        }
        None => {
            let _ = write!(s, "{sep}{sep}");
        }
    }
    s.push('\n');
    s
}

/// The heading of the final table: what was counted, and over how many runs.
pub fn table_header(target: &str, runs: u32) -> String {
    if runs > 1 {
        format!("\n Performance counter stats for {target} ({runs} runs):\n\n")
    } else {
        format!("\n Performance counter stats for {target}:\n\n")
    }
}

/// The digits perf shows a mean with: two more than the spread's first significant one.
fn precision(spread: f64) -> usize {
    if spread > 1.0 || spread <= 0.0 || !spread.is_finite() {
        return if spread <= 0.0 { 9 } else { 2 };
    }
    (-spread.log10()).ceil() as usize + 2
}

/// The lines under the table: wall time (with its spread over runs), and the command's
/// user and system time after a single run.
pub fn table_footer(elapsed: &[f64], rusage: Option<(f64, f64)>) -> String {
    let mut s = String::from("\n");
    if elapsed.len() > 1 {
        let (mean, spread) = mean_spread(elapsed);
        let p = precision(spread);
        let pct = if mean > 0.0 {
            100.0 * spread / mean
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            "{mean:18.p$} +- {spread:.p$} seconds time elapsed  ( +-{pct:6.2}% )"
        );
    } else {
        let _ = writeln!(
            s,
            "{:18.9} seconds time elapsed",
            elapsed.first().copied().unwrap_or(0.0)
        );
    }
    if let Some((user, sys)) = rusage {
        let _ = write!(s, "\n{user:18.9} seconds user\n{sys:18.9} seconds sys\n\n");
    }
    s.push('\n');
    s
}

/// The mean of `values` and the standard deviation of that mean, as perf's
/// `stddev_stats` (sample variance over n).
pub fn mean_spread(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn faults(count: f64) -> Line {
        Line {
            event: "page-faults".into(),
            clock: false,
            count: Count::Value(count),
            enabled: 1_716_268,
            running: 1_716_268,
            noise: None,
            metrics: Vec::new(),
            cpu: None,
        }
    }

    // The expected lines below are perf 6.1's output, copied byte for byte.
    #[test]
    fn text_lines_are_perfs() {
        let mut l = faults(102.0);
        assert_eq!(
            text_line(None, &l),
            "               102      page-faults                                                        \n"
        );
        l.metrics.push(Metric::rate(51_396.0));
        assert_eq!(
            text_line(None, &l),
            "               102      page-faults                      #   51.396 K/sec                  \n"
        );
        let clock = Line {
            event: "task-clock".into(),
            clock: true,
            count: Count::Value(1_980_000.0),
            metrics: vec![Metric::cpus_utilized(0.639)],
            ..faults(0.0)
        };
        assert_eq!(
            text_line(None, &clock),
            "              1.98 msec task-clock                       #    0.639 CPUs utilized          \n"
        );
        let mut cpu = faults(78.0);
        cpu.cpu = Some(0);
        cpu.metrics.push(Metric::rate(763.708));
        assert_eq!(
            text_line(None, &cpu),
            "CPU0                       78      page-faults                      #  763.708 /sec                   \n"
        );
        let mut r = faults(99.0);
        r.noise = Some(1.21);
        assert_eq!(
            text_line(None, &r),
            "                99      page-faults                                                          ( +-  1.21% )\n"
        );
    }

    #[test]
    fn interval_lines_are_perfs() {
        let l = faults(79.0);
        assert_eq!(
            text_line(Some(200_303_135), &l),
            "     0.200303135                 79      page-faults                                                        \n"
        );
        let mut c = faults(1.0);
        c.cpu = Some(0);
        assert_eq!(
            text_line(Some(150_270_828), &c),
            "     0.150270828 CPU0                        1      page-faults                                                        \n"
        );
        let layout = Layout::default();
        assert_eq!(
            interval_header(&layout).unwrap(),
            "#           time             counts unit events\n"
        );
    }

    #[test]
    fn csv_lines_are_perfs() {
        let mut l = faults(49.0);
        l.enabled = 555_302;
        l.running = 555_302;
        assert_eq!(csv_line(",", None, &l), "49,,page-faults,555302,100.00,,\n");
        let mut m = faults(103.0);
        m.metrics.push(Metric::rate(60_014.0));
        assert_eq!(
            csv_line(",", None, &m),
            "103,,page-faults,1716268,100.00,60.014,K/sec\n"
        );
        let clock = Line {
            event: "task-clock".into(),
            clock: true,
            count: Count::Value(1_720_000.0),
            metrics: vec![Metric::cpus_utilized(0.559)],
            ..faults(0.0)
        };
        assert_eq!(
            csv_line(",", None, &clock),
            "1.72,msec,task-clock,1716268,100.00,0.559,CPUs utilized\n"
        );
        let mut i = faults(79.0);
        i.enabled = 401_016_828;
        i.running = 401_016_828;
        assert_eq!(
            csv_line(",", Some(200_311_661), &i),
            "     0.200311661,79,,page-faults,401016828,100.00,,\n"
        );
        let mut c = faults(0.0);
        c.cpu = Some(0);
        c.enabled = 102_182_242;
        c.running = 102_182_242;
        assert_eq!(
            csv_line(",", None, &c),
            "CPU0,0,,page-faults,102182242,100.00,,\n"
        );
        let mut r = faults(101.0);
        r.noise = Some(0.5);
        r.enabled = 1_427_436;
        r.running = 1_427_436;
        r.metrics.push(Metric::rate(69_199.0));
        assert_eq!(
            csv_line(",", None, &r),
            "101,,page-faults,0.50%,1427436,100.00,69.199,K/sec\n"
        );
    }

    #[test]
    fn lines_without_a_count_are_perfs() {
        let mut l = faults(0.0);
        l.count = Count::NotCounted;
        l.enabled = 0;
        l.running = 0;
        assert_eq!(
            text_line(None, &l),
            "     <not counted>      page-faults                                                 \n"
        );
        assert_eq!(
            csv_line(",", None, &l),
            "<not counted>,,page-faults,0,100.00,,\n"
        );
        l.count = Count::NotSupported;
        l.event = "cycles".into();
        assert_eq!(
            text_line(None, &l),
            "   <not supported>      cycles                                                      \n"
        );
        assert_eq!(
            csv_line(",", None, &l),
            "<not supported>,,cycles,0,100.00,,\n"
        );
    }

    #[test]
    fn multiplexed_counts_show_the_time_they_ran() {
        let mut l = faults(2000.0);
        l.enabled = 1000;
        l.running = 500;
        assert!(text_line(None, &l).ends_with("  (50.00%)\n"));
        assert!(csv_line(";", None, &l).contains(";500;50.00;"));
    }

    #[test]
    fn bytes_are_binary_units_and_exact_in_csv() {
        let m = Metric::bytes(32.0 * 1024.0 * 1024.0 * 7.0, "len");
        assert_eq!(m.unit, "MiB len");
        assert!((m.value - 224.0).abs() < 1e-9);
        assert_eq!(m.csv, ("234881024".into(), "bytes len".into()));
        assert_eq!(Metric::bytes(100.0, "grown").unit, "B grown");
    }

    #[test]
    fn footers_are_perfs() {
        assert_eq!(
            table_footer(&[0.003104782], Some((0.003219, 0.0))),
            "\n       0.003104782 seconds time elapsed\n\n       0.003219000 seconds user\n       0.000000000 seconds sys\n\n\n"
        );
        assert_eq!(
            table_footer(&[0.102135096], None),
            "\n       0.102135096 seconds time elapsed\n\n"
        );
        // perf: 0.0027808 +- 0.0000957 (the spread's first digit decides the precision).
        let f = table_footer(&[0.0026851, 0.0028765, 0.0027808], None);
        assert_eq!(
            f,
            "\n         0.0027808 +- 0.0000553 seconds time elapsed  ( +-  1.99% )\n\n"
        );
        assert_eq!(
            table_header("'ls'", 3),
            "\n Performance counter stats for 'ls' (3 runs):\n\n"
        );
    }

    #[test]
    fn spread_is_the_standard_error_of_the_mean() {
        let (mean, sd) = mean_spread(&[2.0, 4.0, 6.0]);
        assert_eq!(mean, 4.0);
        // Sample variance 4, over n = 3.
        assert!((sd - (4.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_spread(&[5.0]), (5.0, 0.0));
    }
}
