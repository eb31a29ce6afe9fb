#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf mem`: recordings built per the kernel ABI with known memory samples (loads at
//! known data addresses in `fixtures/memdata.c`'s `.data` and `.bss` hitting L1, LFB, L3,
//! DRAM and remote caches, stores, locked accesses, TLB misses, HITM snoops, WEIGHT_STRUCT
//! with var2/var3), read by memperf and by perf, which must agree.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use memperf::perfdata::{ATTR_SIZE_VER7, EventDesc, Features, MemperfStats, PerfDataWriter};
use memperf::records::{
    Mmap2Fields, ParseInfo, Sample, SampleId, encode_comm, encode_finished_round, encode_mmap2,
    encode_sample,
};
use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags};
use perf_event_open_sys::bindings::{self as b, perf_event_attr};

use common::*;

const PID: u32 = 31337;
const BASE: u64 = 0x5600_0000_0000;
/// An anonymous mapping (a malloc arena) and an address in no mapping.
const ANON: u64 = 0x7f00_1234_0000;
const NOWHERE: u64 = 0x7e00_0000_0000;

// perf_mem_data_src fields (include/uapi/linux/perf_event.h), written out here so that the
// test does not share memperf's decoder's constants.
const OP_LOAD: u64 = 0x2;
const OP_STORE: u64 = 0x4;
const LVL_HIT: u64 = 0x2 << 5;
const LVL_MISS: u64 = 0x4 << 5;
const LVL_L1: u64 = 0x8 << 5;
const LVL_LFB: u64 = 0x10 << 5;
const LVL_L2: u64 = 0x20 << 5;
const LVL_L3: u64 = 0x40 << 5;
const LVL_LOC_RAM: u64 = 0x80 << 5;
const LVL_REM_RAM1: u64 = 0x100 << 5;
const LVL_REM_CCE1: u64 = 0x400 << 5;
const LVL_NA: u64 = 0x1 << 5;
const SNOOP_NONE: u64 = 0x2 << 19;
const SNOOP_HIT: u64 = 0x4 << 19;
const SNOOP_MISS: u64 = 0x8 << 19;
const SNOOP_HITM: u64 = 0x10 << 19;
const SNOOP_NA: u64 = 0x1 << 19;
const LOCK_NA: u64 = 0x1 << 24;
const LOCK_LOCKED: u64 = 0x2 << 24;
const TLB_HIT: u64 = 0x2 << 26;
const TLB_MISS: u64 = 0x4 << 26;
const TLB_L1: u64 = 0x8 << 26;
const TLB_L2: u64 = 0x10 << 26;
const TLB_WK: u64 = 0x20 << 26;
const TLB_OS: u64 = 0x40 << 26;
const TLB_NA: u64 = 0x1 << 26;
const LVLNUM_L1: u64 = 1 << 33;
const LVLNUM_L2: u64 = 2 << 33;
const LVLNUM_L3: u64 = 3 << 33;
const LVLNUM_ANY_CACHE: u64 = 0xb << 33;
const LVLNUM_LFB: u64 = 0xc << 33;
const LVLNUM_RAM: u64 = 0xd << 33;
const LVLNUM_PMEM: u64 = 0xe << 33;
const REMOTE: u64 = 1 << 37;
const SNOOPX_FWD: u64 = 1 << 38;
const SNOOPX_PEER: u64 = 2 << 38;
const BLK_NA: u64 = 1 << 40;
const BLK_DATA: u64 = 2 << 40;
const BLK_ADDR: u64 = 4 << 40;
const HOPS_0: u64 = 1 << 43;
const HOPS_2: u64 = 3 << 43;

/// A sample: the function it is in, the data symbol (and offset) it touched, its data
/// source and its weight.
struct Access {
    func: &'static str,
    data: (&'static str, u64),
    data_src: u64,
    weight: u64,
}

/// memdata's symbols and segments, read from the ELF file.
struct Image {
    path: PathBuf,
    syms: Vec<(String, u64)>,
    /// (p_vaddr, p_offset, p_memsz) of the executable and the writable PT_LOAD.
    text: (u64, u64, u64),
    data: (u64, u64, u64),
}

impl Image {
    fn read(path: &Path) -> Image {
        let bytes = std::fs::read(path).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        let seg = |flag: u32| {
            let s = file
                .segments()
                .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & flag != 0))
                .unwrap();
            (s.address(), s.file_range().0, s.size())
        };
        Image {
            path: path.to_path_buf(),
            syms: file
                .symbols()
                .map(|s| (s.name().unwrap_or("").to_string(), s.address()))
                .collect(),
            text: seg(1),
            data: seg(2),
        }
    }

    fn sym(&self, name: &str) -> u64 {
        self.syms.iter().find(|s| s.0 == name).unwrap().1
    }
}

fn mem_attr(weight_struct: bool) -> perf_event_attr {
    let weight = if weight_struct {
        b::PERF_SAMPLE_WEIGHT_STRUCT
    } else {
        b::PERF_SAMPLE_WEIGHT
    };
    let mut attr = perf_event_attr {
        type_: b::PERF_TYPE_RAW,
        size: ATTR_SIZE_VER7 as u32,
        config: 0x1cd,
        sample_type: u64::from(
            b::PERF_SAMPLE_IDENTIFIER
                | b::PERF_SAMPLE_IP
                | b::PERF_SAMPLE_TID
                | b::PERF_SAMPLE_TIME
                | b::PERF_SAMPLE_ADDR
                | b::PERF_SAMPLE_CPU
                | b::PERF_SAMPLE_PERIOD
                | b::PERF_SAMPLE_DATA_SRC
                | b::PERF_SAMPLE_PHYS_ADDR,
        ) | u64::from(weight)
            | u64::from(b::PERF_SAMPLE_DATA_PAGE_SIZE),
        ..perf_event_attr::default()
    };
    attr.__bindgen_anon_3.config1 = 30;
    attr.sample_period = 4000;
    attr.set_precise_ip(3);
    attr.set_sample_id_all(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    attr.set_disabled(1);
    attr.set_mmap_data(1);
    attr
}

/// Writes a recording of `accesses` by one memdata process; returns its path.
fn write_mem_file(dir: &Path, name: &str, img: &Image, accesses: &[Access], ws: bool) -> PathBuf {
    let path = dir.join(name);
    let attr = mem_attr(ws);
    let info = ParseInfo::from_attr(&attr);
    let id = 77;
    let sid = |t: u64| SampleId {
        pid: Some(PID),
        tid: Some(PID),
        time: Some(t),
        cpu: Some(0),
        identifier: Some(id),
        ..SampleId::default()
    };
    let mut buf = Vec::new();
    encode_comm(&mut buf, PID, PID, b"memdata", true, &sid(1000), &info);
    let file = img.path.as_os_str().as_encoded_bytes();
    for (i, (seg, prot)) in [
        (img.text, libc::PROT_READ | libc::PROT_EXEC),
        (img.data, libc::PROT_READ | libc::PROT_WRITE),
    ]
    .into_iter()
    .enumerate()
    {
        let (vaddr, off, memsz) = seg;
        let start = vaddr & !0xfff;
        let m = Mmap2Fields {
            pid: PID,
            tid: PID,
            addr: BASE + start,
            len: ((vaddr + memsz + 0xfff) & !0xfff) - start,
            pgoff: off & !0xfff,
            prot: prot as u32,
            flags: libc::MAP_PRIVATE as u32,
            filename: file,
            ..Mmap2Fields::default()
        };
        let misc = if i == 0 {
            0
        } else {
            b::PERF_RECORD_MISC_MMAP_DATA as u16
        };
        let mut one = Vec::new();
        encode_mmap2(&mut one, &m, &sid(1001 + i as u64), &info);
        // misc is the u16 after the u32 type.
        one[4..6].copy_from_slice(&(misc | b::PERF_RECORD_MISC_USER as u16).to_le_bytes());
        buf.extend_from_slice(&one);
    }
    let anon = Mmap2Fields {
        pid: PID,
        tid: PID,
        addr: ANON,
        len: 0x21000,
        prot: (libc::PROT_READ | libc::PROT_WRITE) as u32,
        flags: libc::MAP_PRIVATE as u32,
        filename: b"//anon",
        ..Mmap2Fields::default()
    };
    let mut one = Vec::new();
    encode_mmap2(&mut one, &anon, &sid(1003), &info);
    let misc = b::PERF_RECORD_MISC_MMAP_DATA as u16 | b::PERF_RECORD_MISC_USER as u16;
    one[4..6].copy_from_slice(&misc.to_le_bytes());
    buf.extend_from_slice(&one);
    for (i, a) in accesses.iter().enumerate() {
        let ip = BASE + img.sym(a.func) + 4;
        let addr = match a.data.0 {
            "//anon" => ANON + a.data.1,
            "nowhere" => NOWHERE + a.data.1,
            sym => BASE + img.sym(sym) + a.data.1,
        };
        let s = Sample {
            identifier: Some(id),
            ip: Some(ip),
            pid: Some(PID),
            tid: Some(PID),
            time: Some(2_000_000 + i as u64 * 1000),
            addr: Some(addr),
            cpu: Some(1),
            period: Some(4000),
            weight: Some(a.weight),
            data_src: Some(a.data_src),
            phys_addr: Some(0x1_0000_0000 + (addr & 0xfff)),
            data_page_size: Some(4096),
            ..Sample::default()
        };
        encode_sample(&mut buf, b::PERF_RECORD_MISC_USER as u16, &s, &info, None).unwrap();
    }
    encode_finished_round(&mut buf);
    let events = vec![EventDesc {
        attr,
        name: "cpu/mem-loads,ldlat=30/P".into(),
        ids: vec![id],
    }];
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    w.write_record(&buf).unwrap();
    let features = Features {
        sample_time: Some((2_000_000, 2_000_000 + accesses.len() as u64 * 1000)),
        ..Features::from_system(vec!["memperf".into(), "mem".into(), "record".into()])
    };
    w.finish(&features).unwrap();
    path
}

/// The accesses the tests record: every level, snoop, TLB and lock case the brief names.
fn accesses() -> Vec<Access> {
    let load = OP_LOAD | LOCK_NA | BLK_NA;
    let tlb_hit = TLB_L1 | TLB_L2 | TLB_HIT;
    let a = |func, data, data_src, weight| Access {
        func,
        data,
        data_src,
        weight,
    };
    vec![
        a(
            "load_counters",
            ("counters", 0),
            load | LVL_L1 | LVL_HIT | SNOOP_NONE | tlb_hit,
            7 | (2 << 32),
        ),
        a(
            "load_counters",
            ("counters", 8),
            load | LVL_L1 | LVL_HIT | SNOOP_NONE | tlb_hit,
            9,
        ),
        a(
            "load_counters",
            ("table", 64),
            load | LVL_LFB | LVL_HIT | SNOOP_NONE | tlb_hit,
            41,
        ),
        a(
            "load_counters",
            ("table", 128),
            load | LVL_L3 | LVL_HIT | SNOOP_HIT | tlb_hit,
            95,
        ),
        a(
            "load_counters",
            ("table", 512),
            load | LVL_L3 | LVL_HIT | SNOOP_HITM | tlb_hit,
            180,
        ),
        a(
            "load_counters",
            ("counters", 64),
            load | LVL_LOC_RAM | LVL_HIT | SNOOP_MISS | TLB_WK | TLB_MISS,
            310,
        ),
        a(
            "load_counters",
            ("counters", 128),
            OP_LOAD | LOCK_NA | LVL_REM_RAM1 | LVL_HIT | SNOOP_HIT | REMOTE | tlb_hit,
            420,
        ),
        a(
            "load_counters",
            ("table", 256),
            OP_LOAD
                | LOCK_NA
                | LVL_REM_CCE1
                | LVL_HIT
                | SNOOP_HITM
                | REMOTE
                | HOPS_2
                | LVLNUM_ANY_CACHE
                | tlb_hit,
            500,
        ),
        a(
            "load_counters",
            ("table", 0),
            OP_LOAD
                | LOCK_NA
                | LVL_L2
                | LVL_HIT
                | LVLNUM_L2
                | SNOOPX_PEER
                | TLB_OS
                | TLB_MISS
                | BLK_DATA,
            60,
        ),
        a(
            "load_counters",
            ("counters", 16),
            OP_LOAD | LOCK_NA | LVL_NA | LVLNUM_LFB | SNOOPX_FWD | tlb_hit | BLK_ADDR | BLK_DATA,
            33,
        ),
        a(
            "load_counters",
            ("table", 4),
            OP_LOAD | LVLNUM_RAM | LVL_HIT | REMOTE | HOPS_0 | SNOOP_NA | TLB_NA,
            250,
        ),
        a(
            "load_counters",
            ("table", 8),
            OP_LOAD | LVLNUM_PMEM | LVLNUM_L3 | LVL_MISS,
            700,
        ),
        a(
            "store_scratch",
            ("scratch", 0),
            OP_STORE | LVL_L1 | LVL_HIT | SNOOP_NA | LOCK_NA | TLB_NA | BLK_NA,
            0,
        ),
        a(
            "store_scratch",
            ("scratch", 4096),
            OP_STORE | LVL_L1 | LVL_MISS | SNOOP_NA | LOCK_NA | TLB_NA | BLK_NA,
            0,
        ),
        a(
            "store_scratch",
            ("scratch", 8000),
            OP_STORE | LVL_L1 | LVL_HIT | SNOOP_NA | LOCK_NA | TLB_NA | BLK_NA,
            0,
        ),
        a(
            "lock_flags",
            ("flags", 8),
            OP_LOAD | LVL_L1 | LVL_HIT | SNOOP_NONE | LOCK_LOCKED | tlb_hit | BLK_NA,
            24,
        ),
        a(
            "lock_flags",
            ("flags", 8),
            OP_LOAD | LVL_L3 | LVL_HIT | SNOOP_HITM | LOCK_LOCKED | tlb_hit | BLK_NA,
            210,
        ),
        a(
            "lock_flags",
            ("flags", 0),
            OP_STORE | LVLNUM_L1 | LVL_HIT | LOCK_LOCKED | TLB_L1 | TLB_HIT,
            0,
        ),
        a("main", ("//anon", 0x18), 0, 0),
        a(
            "main",
            ("//anon", 0x2010),
            OP_LOAD | LVL_L2 | LVL_HIT,
            40 | (12 << 32) | (3 << 48),
        ),
        a(
            "main",
            ("nowhere", 0x40),
            OP_LOAD | LVL_L2 | LVL_HIT,
            40 | (9 << 32),
        ),
    ]
}

fn perf(args: &[&str], file: &Path) -> String {
    let out = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn memperf_out(args: &[&str]) -> String {
    let o = run_memperf(args);
    assert!(o.status.success(), "memperf {args:?}: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The table of a perf mem report text: from its column header to its last row.
fn table(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("# Overhead"))
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn script_memory_fields_match_perf_script() {
    if !require_perf_tool("mem script") {
        return;
    }
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    for ws in [true, false] {
        let f = write_mem_file(dir.path(), &format!("mem-{ws}.data"), &img, &accesses(), ws);
        let fields: &[&str] = if ws {
            &[
                "comm,tid,addr,data_src,weight,ins_lat",
                "tid,data_src",
                "addr,weight",
            ]
        } else {
            &["addr,data_src,weight", "data_src"]
        };
        for fields in fields {
            let theirs = perf(&["script", "-F", fields], &f);
            let ours = memperf_out(&["script", "-F", fields, "-i", f.to_str().unwrap()]);
            assert_eq!(theirs.lines().count(), accesses().len(), "{theirs}");
            assert_eq!(ours, theirs, "-F {fields}, WEIGHT_STRUCT {ws}");
        }
    }
}

#[test]
fn mem_report_table_matches_perf_mem_report() {
    if !require_perf_tool("mem report") {
        return;
    }
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    let f = write_mem_file(dir.path(), "mem.data", &img, &accesses(), true);
    let theirs = perf(&["mem", "report", "--stdio"], &f);
    let ours = memperf_out(&["mem", "report", "-i", f.to_str().unwrap()]);
    let (t, o) = (table(&theirs), table(&ours));
    // The header, the dots, '#' and one row per distinct access.
    assert_eq!(t.len(), 3 + accesses().len(), "{theirs}");
    assert_eq!(o, t, "ours:\n{ours}\nperf's:\n{theirs}");
    // Data symbols of .data and .bss, and an unresolved heap address, named as expected.
    for want in [
        "[.] table+0x8 ",
        "[.] scratch+0x1f40 ",
        "[.] flags+0x8 ",
        "[.] 0x00007f0012342010",
    ] {
        assert!(ours.contains(want), "{want}:\n{ours}");
    }
    // perf's overhead: the weight, 1 for a sample without one.
    let total: u64 = accesses()
        .iter()
        .map(|a| (a.weight & 0xffff_ffff).max(1))
        .sum();
    assert!(
        ours.contains(&format!("# Total weight : {total}\n")),
        "{ours}"
    );
}

#[test]
fn mem_report_by_mapping_sums_weights() {
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    let f = write_mem_file(dir.path(), "mem.data", &img, &accesses(), true);
    let ours = memperf_out(&[
        "mem",
        "report",
        "--by",
        "mapping",
        "-i",
        f.to_str().unwrap(),
    ]);
    let total: u64 = accesses().iter().map(|a| a.weight & 0xffff_ffff).sum();
    let anon: u64 = accesses()
        .iter()
        .filter(|a| a.data.0 == "//anon")
        .map(|a| a.weight & 0xffff_ffff)
        .sum();
    let row = |name: &str| {
        ours.lines()
            .find(|l| l.ends_with(name))
            .unwrap_or_else(|| panic!("{name}:\n{ours}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let file_row = row(img.path.to_str().unwrap());
    assert_eq!(file_row[1], (accesses().len() - 3).to_string(), "{ours}");
    assert_eq!(file_row[2], (total - anon - 40).to_string(), "{ours}");
    assert_eq!(
        row("//anon")[1..3],
        ["2".to_string(), anon.to_string()],
        "{ours}"
    );
    assert_eq!(
        row("[unknown]")[1..3],
        ["1".to_string(), "40".to_string()],
        "{ours}"
    );
}

#[test]
fn recordings_without_memory_samples_are_refused() {
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    let f = write_mem_file(dir.path(), "mem.data", &img, &accesses(), true);
    // The same file with DATA_SRC cleared from the attr: samples no longer parse as memory.
    let no_src = dir.path().join("nosrc.data");
    let mut attr = mem_attr(true);
    attr.sample_type &= !u64::from(b::PERF_SAMPLE_DATA_SRC);
    let events = vec![EventDesc {
        attr,
        name: "cycles".into(),
        ids: vec![1],
    }];
    PerfDataWriter::create(&no_src, events)
        .unwrap()
        .finish(&Features::default())
        .unwrap();
    let o = run_memperf(&["mem", "report", "-i", no_src.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("carries a data source (PERF_SAMPLE_DATA_SRC)"),
        "{}",
        stderr(&o)
    );
    let o = run_memperf(&["script", "-F", "data_src", "-i", no_src.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("cannot print `data_src`"),
        "{}",
        stderr(&o)
    );
    // Cut anywhere: an error or a warning, never a panic.
    let bytes = std::fs::read(&f).unwrap();
    for cut in (0..bytes.len()).step_by(97) {
        let p = dir.path().join("cut.data");
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let o = run_memperf(&["mem", "report", "-i", p.to_str().unwrap()]);
        assert!(
            !stderr(&o).contains("panicked"),
            "cut at {cut}: {}",
            stderr(&o)
        );
    }
}

/// On a machine without a memory-sampling PMU (a VM without a virtual PMU, as CI's), `mem
/// record` says so in those words.
#[test]
fn mem_record_without_pmu_says_why() {
    let devices = Path::new("/sys/bus/event_source/devices");
    let has = |p: &str| devices.join(p).exists();
    let in_vm = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"));
    if has("cpu") || has("cpu_core") || has("ibs_op") || has("arm_spe_0") || !in_vm {
        eprintln!("skipped: this machine has a CPU PMU or is not a VM");
        return;
    }
    let dir = scratch();
    let out = dir.path().join("mem.data");
    let out = out.to_str().unwrap();
    let me = std::process::id().to_string();
    for target in [&["--", "true"][..], &["-p", &me], &["-a"]] {
        let mut args = vec!["mem", "record", "-o", out];
        args.extend_from_slice(target);
        let o = run_memperf(&args);
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains("no hardware PMU (a VM without a virtual PMU)"),
            "{target:?}: {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        // Nothing was recorded, no probe was placed, and no file is left behind.
        assert!(!Path::new(out).exists(), "{target:?} left {out}");
    }
}

#[test]
fn mem_record_refuses_bad_options_with_a_reason() {
    let e = |args: &[&str]| {
        let o = run_memperf(args);
        assert!(!o.status.success(), "{args:?}");
        stderr(&o)
    };
    assert!(e(&["mem", "record"]).contains("give one of -a, -p PID or -- COMMAND"));
    assert!(e(&["mem", "record", "-a", "--", "true"]).contains("give one of"));
    assert!(e(&["mem", "record", "--ldlat", "0", "--", "true"]).contains("at least 1 cycle"));
    assert!(e(&["mem", "record", "-m", "3", "--", "true"]).contains("power of two"));
    assert!(e(&["mem", "record", "-p", "x1", "--", "true"]).contains("give one of"));
    assert!(e(&["mem", "record", "-p", "x1"]).contains("pid"));
}

// ---- `mem report --by allocation`: allocator calls beside the memory samples ----

/// x86 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h).
const REG_AX: u64 = 1 << 0;
const REG_DX: u64 = 1 << 3;
const REG_SI: u64 = 1 << 4;
const REG_DI: u64 = 1 << 5;
const REG_SP: u64 = 1 << 7;
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

/// What the recording holds, in time order.
enum Step {
    /// `func` (a memdata function, called from main) mallocs `size` bytes at ANON + `at`.
    Malloc {
        func: &'static str,
        size: u64,
        at: u64,
    },
    Free {
        at: u64,
    },
    /// A load at `addr` with weight `weight` (var1).
    Load {
        addr: u64,
        weight: u64,
    },
}

/// The attr of an allocator probe as `memperf mem record` writes it: the argument
/// registers and the unwound callchain for an entry, the result register for a return.
fn probe_attr(regs: u64, stack: bool) -> perf_event_attr {
    let mut st = b::PERF_SAMPLE_IDENTIFIER
        | b::PERF_SAMPLE_IP
        | b::PERF_SAMPLE_TID
        | b::PERF_SAMPLE_TIME
        | b::PERF_SAMPLE_CPU
        | b::PERF_SAMPLE_REGS_USER;
    if stack {
        st |= b::PERF_SAMPLE_CALLCHAIN;
    }
    let mut attr = perf_event_attr {
        // The uprobe PMU's dynamic type, as sysfs gives it.
        type_: 8,
        size: ATTR_SIZE_VER7 as u32,
        sample_type: u64::from(st),
        sample_regs_user: regs,
        ..perf_event_attr::default()
    };
    attr.sample_period = 1;
    attr.set_sample_id_all(1);
    attr.set_exclude_callchain_kernel(1);
    attr
}

/// A recording of memdata's process: its mappings, then `steps` (each 1000 ns apart), as
/// `memperf mem record -- memdata` would write it.
fn write_alloc_file(dir: &Path, img: &Image, steps: &[Step]) -> PathBuf {
    let path = dir.join("alloc.data");
    let attrs = [
        mem_attr(true),
        probe_attr(REG_DX | REG_SI | REG_DI | REG_SP, true),
        probe_attr(REG_AX, false),
        probe_attr(REG_DX | REG_SI | REG_DI | REG_SP, false),
    ];
    let names = [
        "cpu/mem-loads,ldlat=30/P",
        "memperf_4242:malloc",
        "memperf_4242:malloc_ret",
        "memperf_4242:free",
    ];
    let infos: Vec<ParseInfo> = attrs.iter().map(ParseInfo::from_attr).collect();
    let ids = [77u64, 78, 79, 80];
    // The mappings, as write_mem_file writes them; its samples are left out.
    let mappings = write_mem_file(dir, "maps.data", img, &[], true);
    let maps_file = memperf::perfdata::PerfDataFile::open(&mappings).unwrap();
    let mut buf = Vec::new();
    for r in maps_file.records() {
        buf.extend_from_slice(r.unwrap().bytes);
    }
    let mut t = 10_000_000u64;
    let mut sample = |buf: &mut Vec<u8>, ev: usize, s: Sample<'_>, chain: Option<&[u64]>| {
        t += 1000;
        let s = Sample {
            identifier: Some(ids[ev]),
            ip: s.ip.or(Some(0x7f00_dead_0000)),
            pid: Some(PID),
            tid: Some(PID),
            time: Some(t),
            cpu: Some(0),
            ..s
        };
        encode_sample(buf, b::PERF_RECORD_MISC_USER as u16, &s, &infos[ev], chain).unwrap();
    };
    for step in steps {
        match *step {
            Step::Malloc { func, size, at } => {
                // Entry: DX, SI, DI, SP in mask order; DI holds the size.
                let regs: Vec<u8> = [0u64, 0, size, 0x7ffc_0000_0000]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                let chain = [
                    PERF_CONTEXT_USER,
                    0x7f00_dead_0000,
                    BASE + img.sym(func) + 5,
                    BASE + img.sym("main") + 5,
                ];
                let s = Sample {
                    regs_user: Some(memperf::records::Regs::new(
                        2,
                        REG_DX | REG_SI | REG_DI | REG_SP,
                        memperf::records::U64Slice::new(&regs),
                    )),
                    ..Sample::default()
                };
                sample(&mut buf, 1, s, Some(&chain));
                let ret = (ANON + at).to_le_bytes();
                let s = Sample {
                    regs_user: Some(memperf::records::Regs::new(
                        2,
                        REG_AX,
                        memperf::records::U64Slice::new(&ret),
                    )),
                    ..Sample::default()
                };
                sample(&mut buf, 2, s, None);
            }
            Step::Free { at } => {
                let regs: Vec<u8> = [0u64, 0, ANON + at, 0x7ffc_0000_0000]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                let s = Sample {
                    regs_user: Some(memperf::records::Regs::new(
                        2,
                        REG_DX | REG_SI | REG_DI | REG_SP,
                        memperf::records::U64Slice::new(&regs),
                    )),
                    ..Sample::default()
                };
                sample(&mut buf, 3, s, None);
            }
            Step::Load { addr, weight } => {
                let s = Sample {
                    ip: Some(BASE + img.sym("load_counters") + 4),
                    addr: Some(addr),
                    period: Some(4000),
                    weight: Some(weight),
                    data_src: Some(OP_LOAD | LVL_L3 | LVL_HIT | SNOOP_HIT),
                    phys_addr: Some(0x1_0000_0000),
                    data_page_size: Some(4096),
                    ..Sample::default()
                };
                sample(&mut buf, 0, s, None);
            }
        }
    }
    encode_finished_round(&mut buf);
    let events = attrs
        .iter()
        .zip(names)
        .zip(ids)
        .map(|((attr, name), id)| EventDesc {
            attr: *attr,
            name: name.into(),
            ids: vec![id],
        })
        .collect();
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    w.write_record(&buf).unwrap();
    // As memperf writes its DWARF stacks, unwound while recording (not the kernel's
    // frame-pointer walk, whose values would be checked against the code).
    let mallocs = steps
        .iter()
        .filter(|s| matches!(s, Step::Malloc { .. }))
        .count() as u64;
    let features = Features {
        sample_time: Some((10_000_000, t)),
        memperf_stats: Some(MemperfStats {
            counts: vec![
                ("unwound".into(), mallocs),
                ("unwound.event.1".into(), mallocs),
            ],
        }),
        ..Features::from_system(vec!["memperf".into(), "mem".into(), "record".into()])
    };
    w.finish(&features).unwrap();
    path
}

/// One row of `--by allocation`: samples, weight, and what it names (the allocation
/// stack's frames, leaf first, or `outside allocations: MAPPING`).
#[derive(Debug, PartialEq, Eq)]
struct AllocRow {
    samples: u64,
    weight: u64,
    avg: String,
    place: Vec<String>,
}

fn alloc_rows(text: &str) -> Vec<AllocRow> {
    let mut rows: Vec<AllocRow> = Vec::new();
    for line in text.lines() {
        if let Some(frame) = line.strip_prefix("\t\t") {
            rows.last_mut().unwrap().place.push(frame.to_string());
        } else if line.starts_with("  ") && line.contains('%') {
            let w: Vec<&str> = line.split_whitespace().collect();
            let place = w[5..].join(" ");
            rows.push(AllocRow {
                samples: w[2].parse().unwrap(),
                weight: w[3].parse().unwrap(),
                avg: w[4].to_string(),
                place: if place == "allocated by:" {
                    Vec::new()
                } else {
                    vec![place]
                },
            });
        }
    }
    rows
}

/// Three allocations from three named functions, a free and the address reused, and loads
/// in them, between them, past their ends, in the program's data and in no mapping.
fn alloc_steps(img: &Image) -> Vec<Step> {
    use Step::*;
    vec![
        Malloc {
            func: "load_counters",
            size: 0x1000,
            at: 0x1000,
        },
        Malloc {
            func: "store_scratch",
            size: 0x800,
            at: 0x4000,
        },
        Load {
            addr: ANON + 0x1000,
            weight: 100,
        },
        Load {
            addr: ANON + 0x1fff,
            weight: 300 | (7 << 32),
        },
        Load {
            addr: ANON + 0x47ff,
            weight: 50,
        },
        // One past the end of store_scratch's block: the arena's, not the block's.
        Load {
            addr: ANON + 0x4800,
            weight: 30,
        },
        Load {
            addr: ANON + 0x10000,
            weight: 20,
        },
        Load {
            addr: BASE + img.sym("counters") + 8,
            weight: 9,
        },
        Load {
            addr: NOWHERE,
            weight: 5,
        },
        // load_counters' block is freed and its address reused by lock_flags' malloc.
        Free { at: 0x1000 },
        Load {
            addr: ANON + 0x1010,
            weight: 700,
        },
        Malloc {
            func: "lock_flags",
            size: 0x1000,
            at: 0x1000,
        },
        Load {
            addr: ANON + 0x1010,
            weight: 1000,
        },
        Load {
            addr: ANON + 0x1ff0,
            weight: 200,
        },
    ]
}

#[test]
fn by_allocation_attributes_each_address_to_the_allocation_live_at_its_time() {
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    let steps = alloc_steps(&img);
    let f = write_alloc_file(dir.path(), &img, &steps);
    let out = memperf_out(&[
        "mem",
        "report",
        "--by",
        "allocation",
        "-i",
        f.to_str().unwrap(),
    ]);
    let row = |samples, weight, avg: &str, place: &[&str]| AllocRow {
        samples,
        weight,
        avg: avg.to_string(),
        place: place.iter().map(|s| s.to_string()).collect(),
    };
    let anon = "outside allocations: //anon";
    assert_eq!(
        alloc_rows(&out),
        [
            row(2, 1200, "600.0", &["lock_flags", "main"]),
            // The freed block's address, sampled before its reuse: the arena's.
            row(3, 750, "250.0", &[anon]),
            row(2, 400, "200.0", &["load_counters", "main"]),
            row(1, 50, "50.0", &["store_scratch", "main"]),
            row(
                1,
                9,
                "9.0",
                &[&format!("outside allocations: {}", img.path.display())]
            ),
            row(1, 5, "5.0", &["outside allocations: [unknown]"]),
        ],
        "{out}"
    );
    assert!(
        out.contains("(10 samples: 5 in allocations, 5 outside them)"),
        "{out}"
    );
    assert!(
        out.contains("# Allocator calls replayed: 3 allocations and 1 frees (0 frees of blocks allocated before the recording began); 0 allocations without a stack"),
        "{out}"
    );
    // perf's table has the memory event's samples only, not the allocator calls.
    let table = memperf_out(&["mem", "report", "-i", f.to_str().unwrap()]);
    assert!(
        table.contains("# Samples: 10  of event 'cpu/mem-loads,ldlat=30/P'"),
        "{table}"
    );
    assert!(!table.contains("malloc"), "{table}");
    // perf reads the file with its allocator probes beside the memory event.
    if require_perf_tool("perf mem report of a file with allocator probes") {
        let theirs = perf(&["mem", "report", "--stdio"], &f);
        assert!(
            theirs.contains("# Samples: 10  of event 'cpu/mem-loads,ldlat=30/P'"),
            "{theirs}"
        );
    }
}

#[test]
fn by_allocation_without_allocator_calls_says_what_to_record() {
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    let f = write_mem_file(dir.path(), "mem.data", &img, &accesses(), true);
    let o = run_memperf(&[
        "mem",
        "report",
        "--by",
        "allocation",
        "-i",
        f.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("holds no allocator calls"), "{err}");
    assert!(err.contains("memperf rss -w FILE"), "{err}");
}

#[test]
fn by_allocation_on_cut_and_mutated_files_never_panics() {
    let dir = scratch();
    let img = Image::read(&fixture("memdata", Variant::Fp));
    let f = write_alloc_file(dir.path(), &img, &alloc_steps(&img));
    let bytes = std::fs::read(&f).unwrap();
    let p = dir.path().join("bad.data");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..160 {
        let mut b = bytes.clone();
        if i % 2 == 0 {
            b.truncate(i * bytes.len() / 160);
        } else {
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed % b.len() as u64) as usize;
                b[at] ^= (seed >> 32) as u8 | 1;
            }
        }
        std::fs::write(&p, &b).unwrap();
        let o = run_memperf(&[
            "mem",
            "report",
            "--by",
            "allocation",
            "-i",
            p.to_str().unwrap(),
        ]);
        assert!(!stderr(&o).contains("panicked"), "case {i}: {}", stderr(&o));
    }
}
