//! Power-of-two histograms printed as bpftrace prints `hist()` maps, for the tools that end
//! with latency distributions (`vmscan`).

use std::io::{self, Write};

/// Counts per power-of-two bucket: bucket 0 holds 0, bucket 1 holds 1, bucket k holds
/// [2^(k-1), 2^k).
#[derive(Debug, Default, Clone)]
pub struct Log2Hist {
    buckets: Vec<u64>,
}

impl Log2Hist {
    pub fn add(&mut self, v: u64) {
        let b = if v == 0 {
            0
        } else {
            64 - v.leading_zeros() as usize
        };
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
    }

    #[cfg(test)]
    pub fn total(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// `@name:` and a line per bucket from the first to the last that is not empty.
    pub fn write(&self, out: &mut dyn Write, name: &str) -> io::Result<()> {
        writeln!(out, "@{name}:")?;
        let first = self.buckets.iter().position(|&n| n > 0);
        let last = self.buckets.iter().rposition(|&n| n > 0);
        let (Some(first), Some(last)) = (first, last) else {
            return writeln!(out);
        };
        let max = self.buckets[first..=last]
            .iter()
            .copied()
            .max()
            .unwrap_or(1);
        for b in first..=last {
            let n = self.buckets[b];
            let label = match b {
                0 => "[0]".to_string(),
                1 => "[1]".to_string(),
                _ => format!("[{}, {})", short(1 << (b - 1)), short(1 << b)),
            };
            let bar = (n * 52).div_ceil(max.max(1)) as usize;
            writeln!(out, "{label:<16}{n:>8} |{:<52}|", "@".repeat(bar))?;
        }
        writeln!(out)
    }
}

/// 1024 → `1K`, as bpftrace labels buckets.
fn short(v: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024 && v.is_multiple_of(1024) && u + 1 < UNITS.len() {
        v /= 1024;
        u += 1;
    }
    format!("{v}{}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_as_bpftrace() {
        let mut h = Log2Hist::default();
        for v in [9000, 10000, 40000] {
            h.add(v);
        }
        let mut out = Vec::new();
        h.write(&mut out, "direct_reclaim_ns").unwrap();
        let want = format!(
            "@direct_reclaim_ns:\n[8K, 16K)              2 |{}|\n[16K, 32K)             0 |{}|\n[32K, 64K)             1 |{:<52}|\n\n",
            "@".repeat(52),
            " ".repeat(52),
            "@".repeat(26)
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
        assert_eq!(h.total(), 3);
    }
}
