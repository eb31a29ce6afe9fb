#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn s(shift: u32, v: u64) -> u64 {
    v << shift
}

fn all(v: u64) -> String {
    let mut out = String::new();
    DataSrc(v).write_all(&mut out);
    out
}

/// An Intel PEBS L1 load hit: op LOAD, lvl L1|HIT, snoop NONE, dtlb L1|L2|HIT, lock NA.
#[test]
fn pebs_l1_hit() {
    let v = s(PERF_MEM_OP_SHIFT, PERF_MEM_OP_LOAD)
        | s(PERF_MEM_LVL_SHIFT, PERF_MEM_LVL_L1 | PERF_MEM_LVL_HIT)
        | s(PERF_MEM_SNOOP_SHIFT, PERF_MEM_SNOOP_NONE)
        | s(
            PERF_MEM_TLB_SHIFT,
            PERF_MEM_TLB_L1 | PERF_MEM_TLB_L2 | PERF_MEM_TLB_HIT,
        )
        | s(PERF_MEM_LOCK_SHIFT, PERF_MEM_LOCK_NA);
    assert_eq!(
        all(v),
        "|OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK N/A|BLK  N/A"
    );
}

/// Zero: every field unknown, as perf prints a sample without a data source.
#[test]
fn zero_is_all_unknown() {
    assert_eq!(all(0), "|OP No|LVL N/A|SNP N/A|TLB N/A|LCK No|BLK  N/A");
}

/// mem_lvl_num after the legacy levels, remote first, HITM and Fwd joined, locked, both
/// blocking reasons, a TLB walk miss.
#[test]
fn composite_fields() {
    let v = s(PERF_MEM_OP_SHIFT, PERF_MEM_OP_LOAD)
        | s(PERF_MEM_LVL_SHIFT, PERF_MEM_LVL_L3 | PERF_MEM_LVL_HIT)
        | s(PERF_MEM_LVLNUM_SHIFT, PERF_MEM_LVLNUM_L3)
        | s(PERF_MEM_REMOTE_SHIFT, 1)
        | s(PERF_MEM_SNOOP_SHIFT, PERF_MEM_SNOOP_HITM)
        | s(PERF_MEM_SNOOPX_SHIFT, PERF_MEM_SNOOPX_FWD)
        | s(PERF_MEM_TLB_SHIFT, PERF_MEM_TLB_WK | PERF_MEM_TLB_MISS)
        | s(PERF_MEM_LOCK_SHIFT, PERF_MEM_LOCK_LOCKED)
        | s(PERF_MEM_BLK_SHIFT, PERF_MEM_BLK_DATA | PERF_MEM_BLK_ADDR);
    assert_eq!(
        all(v),
        "|OP LOAD|LVL Remote L3 or L3 hit|SNP HitM or Fwd|TLB Walker miss|LCK Yes|BLK  Data Addr"
    );
}

/// With mem_hops the legacy levels are not printed: the hop, then mem_lvl_num.
#[test]
fn hops_replace_legacy_levels() {
    let v = s(PERF_MEM_OP_SHIFT, PERF_MEM_OP_LOAD)
        | s(PERF_MEM_LVL_SHIFT, PERF_MEM_LVL_REM_CCE1 | PERF_MEM_LVL_HIT)
        | s(PERF_MEM_LVLNUM_SHIFT, PERF_MEM_LVLNUM_ANY_CACHE)
        | s(PERF_MEM_REMOTE_SHIFT, 1)
        | s(PERF_MEM_HOPS_SHIFT, 2);
    let mut out = String::new();
    DataSrc(v).write_lvl(&mut out);
    assert_eq!(out, "Remote node, same socket Any cache hit");
    // An unnamed level number prints as L<n>.
    let mut out = String::new();
    DataSrc(s(PERF_MEM_LVLNUM_SHIFT, 5)).write_lvl(&mut out);
    assert_eq!(out, "L5");
}

#[test]
fn fields_are_read_at_their_shifts() {
    let d = DataSrc(u64::MAX);
    assert_eq!(
        (d.op(), d.lvl(), d.snoop(), d.lock(), d.dtlb()),
        (0x1f, 0x3fff, 0x1f, 3, 0x7f)
    );
    assert_eq!(
        (d.lvl_num(), d.remote(), d.snoopx(), d.blk(), d.hops()),
        (0xf, true, 3, 7, 7)
    );
    let d = DataSrc(s(PERF_MEM_HOPS_SHIFT, 3));
    assert_eq!((d.hops(), d.blk(), d.snoopx()), (3, 0, 0));
}

#[test]
fn weight_struct_parts() {
    let raw = 0x0003_0002_0000_01f4u64;
    assert_eq!(
        Weight::of(raw, true),
        Weight {
            var1: 500,
            var2: 2,
            var3: 3
        }
    );
    assert_eq!(Weight::of(raw, false).var1, raw);
}
