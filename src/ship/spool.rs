//! The requests a backend has not yet taken, oldest first, bounded in bytes: in a directory
//! (kept across restarts of the agent) or, without one, in memory. Past the bound the
//! oldest are dropped, and counted.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};

/// One pending request.
enum Item {
    Memory(Vec<u8>),
    File(PathBuf, u64),
}

impl Item {
    fn len(&self) -> u64 {
        match self {
            Item::Memory(b) => b.len() as u64,
            Item::File(_, n) => *n,
        }
    }
}

/// A bounded queue of encoded requests.
pub struct Spool {
    dir: Option<PathBuf>,
    items: VecDeque<Item>,
    bytes: u64,
    max_bytes: u64,
    next: u64,
    /// Requests dropped to keep within the bound (the oldest first).
    pub dropped: u64,
}

/// The suffix of a spooled request's file.
const SUFFIX: &str = ".req";

impl Spool {
    /// A spool in `dir` (created if missing; the requests already there are taken up,
    /// oldest first), or in memory.
    pub fn open(dir: Option<&Path>, max_bytes: u64) -> io::Result<Spool> {
        let mut s = Spool {
            dir: dir.map(Path::to_path_buf),
            items: VecDeque::new(),
            bytes: 0,
            max_bytes,
            next: 0,
            dropped: 0,
        };
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir)?;
            let mut found: Vec<(u64, PathBuf, u64)> = Vec::new();
            for e in std::fs::read_dir(dir)? {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(seq) = name.strip_suffix(SUFFIX).and_then(|n| n.parse().ok()) else {
                    continue;
                };
                let meta = e.metadata()?;
                if meta.is_file() {
                    found.push((seq, e.path(), meta.len()));
                }
            }
            found.sort_unstable();
            for (seq, path, len) in found {
                s.next = s.next.max(seq + 1);
                s.bytes += len;
                s.items.push_back(Item::File(path, len));
            }
            s.trim()?;
        }
        Ok(s)
    }

    /// Queues `body` last.
    pub fn push(&mut self, body: Vec<u8>) -> io::Result<()> {
        let len = body.len() as u64;
        let item = match &self.dir {
            Some(dir) => {
                let path = dir.join(format!("{:020}{SUFFIX}", self.next));
                let tmp = dir.join(format!("{:020}.tmp", self.next));
                std::fs::write(&tmp, &body)?;
                std::fs::rename(&tmp, &path)?;
                Item::File(path, len)
            }
            None => Item::Memory(body),
        };
        self.next += 1;
        self.bytes += len;
        self.items.push_back(item);
        self.trim()
    }

    /// Drops the oldest requests until the rest fit the bound (the newest always stays).
    fn trim(&mut self) -> io::Result<()> {
        while self.bytes > self.max_bytes && self.items.len() > 1 {
            self.pop()?;
            self.dropped += 1;
        }
        Ok(())
    }

    /// The oldest request's bytes.
    pub fn front(&self) -> io::Result<Option<Vec<u8>>> {
        match self.items.front() {
            None => Ok(None),
            Some(Item::Memory(b)) => Ok(Some(b.clone())),
            Some(Item::File(p, _)) => std::fs::read(p).map(Some),
        }
    }

    /// Removes the oldest request (it was delivered, or is dropped).
    pub fn pop(&mut self) -> io::Result<()> {
        if let Some(item) = self.items.pop_front() {
            self.bytes -= item.len();
            if let Item::File(p, _) = item {
                std::fs::remove_file(p)?;
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn requests_come_out_oldest_first_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spool::open(Some(dir.path()), 1 << 20).unwrap();
        for i in 0..3u8 {
            s.push(vec![i; 10]).unwrap();
        }
        drop(s);
        let mut s = Spool::open(Some(dir.path()), 1 << 20).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s.front().unwrap(), Some(vec![0; 10]));
        s.pop().unwrap();
        s.push(vec![9; 10]).unwrap();
        let mut order = Vec::new();
        while let Some(b) = s.front().unwrap() {
            order.push(b[0]);
            s.pop().unwrap();
        }
        assert_eq!(order, vec![1, 2, 9]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn past_the_bound_the_oldest_are_dropped_and_counted() {
        for dir in [None, Some(tempfile::tempdir().unwrap())] {
            let mut s = Spool::open(dir.as_ref().map(|d| d.path()), 25).unwrap();
            for i in 0..5u8 {
                s.push(vec![i; 10]).unwrap();
            }
            assert_eq!((s.len(), s.dropped), (2, 3));
            assert_eq!(s.front().unwrap(), Some(vec![3; 10]));
        }
    }
}
