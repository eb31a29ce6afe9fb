//! `/tmp/perf-PID.map` parsing: `START SIZE name` lines written by JITs, hex numbers with
//! or without `0x`. Later entries for the same start replace earlier ones.

#[derive(Clone, Debug, PartialEq, Eq)]
struct JitSym {
    start: u64,
    size: u64,
    name: Box<str>,
}

/// JIT symbols of one process.
#[derive(Clone, Debug, Default)]
pub struct PerfMap {
    syms: Vec<JitSym>,
    malformed: usize,
}

/// How far back a lookup scans for an enclosing entry that overlaps later starts.
const OVERLAP_SCAN: usize = 8;

fn parse_hex(s: &str) -> Option<u64> {
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(digits, 16).ok()
}

fn parse_line(line: &str) -> Option<JitSym> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (start, rest) = line.trim_start().split_once(' ')?;
    let (size, name) = rest.trim_start().split_once(' ')?;
    let name = name.trim();
    let (start, size) = (parse_hex(start)?, parse_hex(size)?);
    if name.is_empty() || size == 0 {
        return None;
    }
    Some(JitSym {
        start,
        size,
        name: name.into(),
    })
}

impl PerfMap {
    /// Parses perf-map text; lines that do not parse are counted and skipped.
    pub fn from_text(text: &str) -> PerfMap {
        let mut syms = Vec::new();
        let mut malformed = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match parse_line(line) {
                Some(s) => syms.push(s),
                None => malformed += 1,
            }
        }
        // Stable sort keeps file order among equal starts; keep the last of them.
        syms.sort_by_key(|s| s.start);
        let mut deduped: Vec<JitSym> = Vec::with_capacity(syms.len());
        for s in syms {
            match deduped.last_mut() {
                Some(last) if last.start == s.start => *last = s,
                _ => deduped.push(s),
            }
        }
        PerfMap {
            syms: deduped,
            malformed,
        }
    }

    /// Number of entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// Lines that did not parse.
    pub fn malformed_lines(&self) -> usize {
        self.malformed
    }

    /// The name and offset of the entry enclosing `addr`.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let end = self.syms.partition_point(|s| s.start <= addr);
        self.syms[..end]
            .iter()
            .rev()
            .take(OVERLAP_SCAN)
            .find(|s| addr - s.start < s.size)
            .map(|s| (&*s.name, addr - s.start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_and_without_0x_and_skips_bad_lines() {
        let m = PerfMap::from_text(
            "7f0000001000 40 LazyCompile:~foo bar.js:1\n\
             0x7f0000002000 0x20 stub\n\
             nonsense\n\
             7f0000003000 zz bad_size\n\
             7f0000004000 10\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m.malformed_lines(), 3);
        assert_eq!(
            m.lookup(0x7f0000001010),
            Some(("LazyCompile:~foo bar.js:1", 0x10))
        );
        assert_eq!(m.lookup(0x7f0000002000), Some(("stub", 0)));
        assert_eq!(m.lookup(0x7f0000001040), None);
        assert_eq!(m.lookup(0x10), None);
    }

    #[test]
    fn later_entry_for_the_same_start_wins() {
        let m = PerfMap::from_text("1000 10 old\n1000 20 new\n");
        assert_eq!(m.lookup(0x1018), Some(("new", 0x18)));
    }
}
