//! `union perf_mem_data_src` (PERF_SAMPLE_DATA_SRC) decoded into the words perf prints:
//! the memory operation, the level that served it (legacy `mem_lvl`, or `mem_lvl_num` with
//! `mem_remote` and `mem_hops`), the snoop (`mem_snoop`, `mem_snoopx`), the data TLB, the
//! lock and the blocking (`mem_blk`).
//!
//! The words and the way they are joined are those of perf 6.1 as distributions ship it
//! (`tools/perf/util/mem-events.c`, `perf_mem__*_scnprintf`, with the later "LFB/MAB" name):
//! the perf `memperf mem report` and `memperf script` are checked against (`tests/mem.rs`).
//! perf 6.8 and later print `mem_lvl_num` alone when it is set ("L2 hit" rather than
//! "L2 or L2 hit"); the recorded value is the same for both.

use std::fmt::Write as _;

use crate::abi::*;

/// One data source value, as the kernel wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(crate) struct DataSrc(pub u64);

impl DataSrc {
    fn field(self, shift: u32, bits: u32) -> u64 {
        (self.0 >> shift) & ((1 << bits) - 1)
    }
    pub(crate) fn op(self) -> u64 {
        self.field(PERF_MEM_OP_SHIFT, 5)
    }
    pub(crate) fn lvl(self) -> u64 {
        self.field(PERF_MEM_LVL_SHIFT, 14)
    }
    pub(crate) fn snoop(self) -> u64 {
        self.field(PERF_MEM_SNOOP_SHIFT, 5)
    }
    pub(crate) fn lock(self) -> u64 {
        self.field(PERF_MEM_LOCK_SHIFT, 2)
    }
    pub(crate) fn dtlb(self) -> u64 {
        self.field(PERF_MEM_TLB_SHIFT, 7)
    }
    pub(crate) fn lvl_num(self) -> u64 {
        self.field(PERF_MEM_LVLNUM_SHIFT, 4)
    }
    pub(crate) fn remote(self) -> bool {
        self.field(PERF_MEM_REMOTE_SHIFT, 1) != 0
    }
    pub(crate) fn snoopx(self) -> u64 {
        self.field(PERF_MEM_SNOOPX_SHIFT, 2)
    }
    pub(crate) fn blk(self) -> u64 {
        self.field(PERF_MEM_BLK_SHIFT, 3)
    }
    pub(crate) fn hops(self) -> u64 {
        self.field(PERF_MEM_HOPS_SHIFT, 3)
    }

    /// The "Memory access" column: `op`, as `perf_mem__op_scnprintf`.
    pub(crate) fn write_op(self, out: &mut String) {
        let op = self.op();
        out.push_str(if op & PERF_MEM_OP_NA != 0 {
            "N/A"
        } else if op & PERF_MEM_OP_LOAD != 0 {
            "LOAD"
        } else if op & PERF_MEM_OP_STORE != 0 {
            "STORE"
        } else if op & PERF_MEM_OP_PFETCH != 0 {
            "PFETCH"
        } else if op & PERF_MEM_OP_EXEC != 0 {
            "EXEC"
        } else {
            "No"
        });
    }

    /// The level that served the access, as `perf_mem__lvl_scnprintf` (perf 6.1): the legacy
    /// levels joined by " or " (or the hops when set), then `mem_lvl_num`, then hit/miss.
    pub(crate) fn write_lvl(self, out: &mut String) {
        let start = out.len();
        let m = self.lvl();
        let mut printed = 0;
        if self.remote() {
            out.push_str("Remote ");
        }
        let hops = self.hops() as usize;
        if hops != 0 {
            // perf indexes its table of five names with the 3-bit field; 5 to 7 have none.
            let name = MEM_HOPS.get(hops).copied().unwrap_or("(null)");
            let _ = write!(out, "{name} ");
        } else {
            let levels = m & !(PERF_MEM_LVL_HIT | PERF_MEM_LVL_MISS);
            printed = join_bits(levels, MEM_LVL, out, printed);
        }
        let num = self.lvl_num();
        if num != 0 {
            if printed > 0 {
                out.push_str(" or ");
            }
            match lvlnum_name(num) {
                Some(name) => out.push_str(name),
                None => {
                    let _ = write!(out, "L{num}");
                }
            }
        }
        if out.len() == start {
            out.push_str("N/A");
        }
        if m & PERF_MEM_LVL_HIT != 0 {
            out.push_str(" hit");
        }
        if m & PERF_MEM_LVL_MISS != 0 {
            out.push_str(" miss");
        }
    }

    /// The "Snoop" column, as `perf_mem__snp_scnprintf`.
    pub(crate) fn write_snoop(self, out: &mut String) {
        let start = out.len();
        let printed = join_bits(self.snoop(), SNOOP, out, 0);
        join_bits(self.snoopx(), SNOOPX, out, printed);
        if out.len() == start {
            out.push_str("N/A");
        }
    }

    /// The "TLB access" column, as `perf_mem__tlb_scnprintf`.
    pub(crate) fn write_tlb(self, out: &mut String) {
        let m = self.dtlb();
        let start = out.len();
        join_bits(m & !(PERF_MEM_TLB_HIT | PERF_MEM_TLB_MISS), TLB, out, 0);
        if out.len() == start {
            out.push_str("N/A");
        }
        if m & PERF_MEM_TLB_HIT != 0 {
            out.push_str(" hit");
        }
        if m & PERF_MEM_TLB_MISS != 0 {
            out.push_str(" miss");
        }
    }

    /// The "Locked" column, as `perf_mem__lck_scnprintf`.
    pub(crate) fn write_lock(self, out: &mut String) {
        let m = self.lock();
        out.push_str(if m & PERF_MEM_LOCK_NA != 0 {
            "N/A"
        } else if m & PERF_MEM_LOCK_LOCKED != 0 {
            "Yes"
        } else {
            "No"
        });
    }

    /// The "Blocked" column, as `perf_mem__blk_scnprintf`: each word after a blank.
    pub(crate) fn write_blk(self, out: &mut String) {
        let m = self.blk();
        if m == 0 || m & PERF_MEM_BLK_NA != 0 {
            out.push_str(" N/A");
            return;
        }
        if m & PERF_MEM_BLK_DATA != 0 {
            out.push_str(" Data");
        }
        if m & PERF_MEM_BLK_ADDR != 0 {
            out.push_str(" Addr");
        }
    }

    /// All of it in one line, as `perf script -F data_src` prints after the value:
    /// `|OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK No|BLK  N/A`.
    pub(crate) fn write_all(self, out: &mut String) {
        out.push_str("|OP ");
        self.write_op(out);
        out.push_str("|LVL ");
        self.write_lvl(out);
        out.push_str("|SNP ");
        self.write_snoop(out);
        out.push_str("|TLB ");
        self.write_tlb(out);
        out.push_str("|LCK ");
        self.write_lock(out);
        out.push_str("|BLK ");
        self.write_blk(out);
    }
}

/// `mem_lvl`'s bits, lowest first (perf's `mem_lvl[]`).
const MEM_LVL: &[&str] = &[
    "N/A",
    "HIT",
    "MISS",
    "L1",
    "LFB/MAB",
    "L2",
    "L3",
    "Local RAM",
    "Remote RAM (1 hop)",
    "Remote RAM (2 hops)",
    "Remote Cache (1 hop)",
    "Remote Cache (2 hops)",
    "I/O",
    "Uncached",
];

/// `mem_hops` values (perf's `mem_hops[]`), after "Remote ".
const MEM_HOPS: &[&str] = &[
    "N/A",
    "core, same node",
    "node, same socket",
    "socket, same board",
    "board",
];

const SNOOP: &[&str] = &["N/A", "None", "Hit", "Miss", "HitM"];
const SNOOPX: &[&str] = &["Fwd", "Peer"];
const TLB: &[&str] = &["N/A", "HIT", "MISS", "L1", "L2", "Walker", "Fault"];

/// The names perf 6.1 gives `mem_lvl_num` values (the others print as `L<n>`).
fn lvlnum_name(num: u64) -> Option<&'static str> {
    Some(match num {
        PERF_MEM_LVLNUM_CXL => "CXL",
        PERF_MEM_LVLNUM_IO => "I/O",
        PERF_MEM_LVLNUM_ANY_CACHE => "Any cache",
        PERF_MEM_LVLNUM_LFB => "LFB/MAB",
        PERF_MEM_LVLNUM_RAM => "RAM",
        PERF_MEM_LVLNUM_PMEM => "PMEM",
        PERF_MEM_LVLNUM_NA => "N/A",
        _ => return None,
    })
}

/// Appends the name of each set bit of `m` (bit i names `names[i]`), joined by " or " after
/// `printed` names already there; returns how many are there now.
fn join_bits(m: u64, names: &[&str], out: &mut String, mut printed: usize) -> usize {
    for (i, name) in names.iter().enumerate() {
        if m & (1 << i) == 0 {
            continue;
        }
        if printed > 0 {
            out.push_str(" or ");
        }
        out.push_str(name);
        printed += 1;
    }
    printed
}

/// A WEIGHT_STRUCT's parts (`union perf_sample_weight`, little-endian): the access latency
/// (`var1_dw`), the instruction latency (`var2_w`) and `var3_w` (pipeline stage cycles on
/// PowerPC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Weight {
    pub var1: u64,
    pub var2: u16,
    pub var3: u16,
}

impl Weight {
    /// The sample's weight as perf reads it: the whole u64 with PERF_SAMPLE_WEIGHT, the
    /// three parts with PERF_SAMPLE_WEIGHT_STRUCT.
    pub(crate) fn of(raw: u64, weight_struct: bool) -> Weight {
        if weight_struct {
            Weight {
                var1: raw & 0xffff_ffff,
                var2: (raw >> 32) as u16,
                var3: (raw >> 48) as u16,
            }
        } else {
            Weight {
                var1: raw,
                ..Weight::default()
            }
        }
    }
}

#[cfg(test)]
mod tests;
