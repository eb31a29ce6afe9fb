//! The print fmt lines of a real kernel (6.18, `fixtures/formats/`) with payloads laid out by
//! their formats' offsets; the expected strings are what perf script printed for such
//! samples.

use super::*;
use crate::perfdata::tracing_data::EventFormat;
use rustc_hash::FxHashMap;

macro_rules! fixture {
    ($name:literal) => {
        EventFormat::parse(include_str!(concat!(
            "../../fixtures/formats/",
            $name,
            ".format"
        )))
        .unwrap()
    };
}

const KALLSYMS: &str = "\
ffffffff8157ab80 T perf_event_mmap
ffffffff8157b000 t perf_event_mmap_output
ffffffff815e2d00 T mas_preallocate
ffffffff815e3200 T mas_store_prealloc
ffffffff81627440 t mm_init
ffffffff81627800 t mm_alloc
";

/// A payload for `f`: integer fields at their offsets, then each string at the end with its
/// `__data_loc` (offset | length << 16) in its field.
fn payload(f: &EventFormat, ints: &[(&str, u64)], strs: &[(&str, &str)]) -> Vec<u8> {
    let end = f.fields.iter().map(|x| x.offset + x.size).max().unwrap();
    let mut raw = vec![0u8; end.next_multiple_of(8)];
    let put = |raw: &mut Vec<u8>, name: &str, v: u64| {
        let field = f.field(name).unwrap_or_else(|| panic!("no field {name}"));
        let bytes = v.to_ne_bytes();
        raw[field.offset..field.offset + field.size].copy_from_slice(&bytes[..field.size]);
    };
    for &(name, v) in ints {
        put(&mut raw, name, v);
    }
    for &(name, s) in strs {
        let at = raw.len() as u64;
        raw.extend_from_slice(s.as_bytes());
        raw.push(0);
        put(&mut raw, name, at | ((s.len() as u64 + 1) << 16));
    }
    raw
}

fn render(f: &EventFormat, raw: &[u8]) -> Result<String, PrintFmtError> {
    let k = Kallsyms::from_text(KALLSYMS);
    let pf = PrintFmt::parse(&f.print_fmt, &f.fields)?;
    let mut out = b"kept ".to_vec();
    let kernel = Kernel {
        kallsyms: Some(&k),
        printk: None,
    };
    let r = pf.render(raw, kernel, &mut out);
    let text = String::from_utf8(out).unwrap();
    match r {
        Ok(()) => Ok(text["kept ".len()..].to_string()),
        Err(e) => {
            assert_eq!(text, "kept ", "an error leaves the output as it was");
            Err(e)
        }
    }
}

#[test]
fn syscall_formats() {
    let f = fixture!("syscalls-sys_enter_brk");
    let raw = payload(&f, &[("__syscall_nr", 12), ("brk", 0x5555_5556_b000)], &[]);
    assert_eq!(render(&f, &raw).unwrap(), "brk: 0x55555556b000");
    let raw = payload(&f, &[("__syscall_nr", 12), ("brk", 0)], &[]);
    assert_eq!(render(&f, &raw).unwrap(), "brk: 0x00000000");

    let f = fixture!("syscalls-sys_exit_brk");
    let raw = payload(&f, &[("ret", 0x563f_0f28_f000)], &[]);
    assert_eq!(render(&f, &raw).unwrap(), "0x563f0f28f000");

    let f = fixture!("syscalls-sys_enter_mmap");
    let raw = payload(
        &f,
        &[("len", 0x841b), ("prot", 1), ("flags", 2), ("fd", 3)],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "addr: 0x00000000, len: 0x0000841b, prot: 0x00000001, flags: 0x00000002, \
         fd: 0x00000003, off: 0x00000000"
    );

    let f = fixture!("syscalls-sys_enter_munmap");
    let raw = payload(&f, &[("addr", 0x7f1c_a7d4_8000), ("len", 0x841b)], &[]);
    assert_eq!(
        render(&f, &raw).unwrap(),
        "addr: 0x7f1ca7d48000, len: 0x0000841b"
    );
}

#[test]
fn raw_syscall_arguments_index_an_array_field() {
    let f = fixture!("raw_syscalls-sys_enter");
    let mut raw = payload(&f, &[("id", 1)], &[]);
    let args = f.field("args").unwrap().offset;
    for (i, v) in [3u64, 0x5617_b725_0170, 8, 0x7ffa8, 0, 0x7ffa8]
        .iter()
        .enumerate()
    {
        raw[args + 8 * i..args + 8 * i + 8].copy_from_slice(&v.to_ne_bytes());
    }
    assert_eq!(
        render(&f, &raw).unwrap(),
        "NR 1 (3, 5617b7250170, 8, 7ffa8, 0, 7ffa8)"
    );
}

#[test]
fn kmalloc_and_kfree() {
    let f = fixture!("kmem-kmalloc");
    let raw = payload(
        &f,
        &[
            ("call_site", 0xffff_ffff_8157_acd5),
            ("ptr", 0xffff_8881_02ad_7000),
            ("bytes_req", 4096),
            ("bytes_alloc", 4096),
            ("gfp_flags", 0xcc0),
            ("node", u64::from(u32::MAX)),
        ],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=perf_event_mmap+0x155 ptr=0xffff888102ad7000 bytes_req=4096 \
         bytes_alloc=4096 gfp_flags=GFP_KERNEL node=-1 accounted=false"
    );
    // __GFP_ACCOUNT: a longer name first, the rest after it; no flags: "none"; a call site
    // outside kallsyms: its address.
    let raw = payload(
        &f,
        &[
            ("call_site", 0x1234),
            ("bytes_req", 100),
            ("bytes_alloc", 128),
            ("gfp_flags", 0x40_0cc0 | 0x100 | 0x4_0000 | 0x8000_0000),
            ("node", 1),
        ],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=0x1234 ptr=(nil) bytes_req=100 bytes_alloc=128 \
         gfp_flags=GFP_KERNEL_ACCOUNT|__GFP_ZERO|__GFP_COMP|0x80000000 node=1 accounted=true"
    );
    let raw = payload(&f, &[("node", 0)], &[]);
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=0x0 ptr=(nil) bytes_req=0 bytes_alloc=0 gfp_flags=none node=0 \
         accounted=false"
    );

    let f = fixture!("kmem-kfree");
    let raw = payload(&f, &[("call_site", 0xffff_ffff_8157_add8)], &[]);
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=perf_event_mmap+0x258 ptr=(nil)"
    );
}

#[test]
fn kmem_cache_alloc_reads_its_name_through_data_loc() {
    let f = fixture!("kmem-kmem_cache_alloc");
    let raw = payload(
        &f,
        &[
            ("call_site", 0xffff_ffff_815e_30ef),
            ("ptr", 0xffff_8882_45bb_8000),
            ("bytes_req", 256),
            ("bytes_alloc", 256),
            ("gfp_flags", 0xcc0),
            ("node", u64::from(u32::MAX)),
        ],
        &[("name", "maple_node")],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=mas_preallocate+0x3ef ptr=0xffff888245bb8000 name=maple_node \
         bytes_req=256 bytes_alloc=256 gfp_flags=GFP_KERNEL node=-1 accounted=false"
    );
    // An empty name prints nothing; `accounted` is a bool field here.
    let raw = payload(
        &f,
        &[("accounted", 1), ("gfp_flags", 0x20)],
        &[("name", "")],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=0x0 ptr=(nil) name= bytes_req=0 bytes_alloc=0 gfp_flags=__GFP_HIGH \
         node=0 accounted=true"
    );
}

#[test]
fn page_allocations_need_vmemmap_base() {
    for f in [
        fixture!("kmem-mm_page_alloc"),
        fixture!("kmem-mm_page_free"),
    ] {
        assert_eq!(
            PrintFmt::parse(&f.print_fmt, &f.fields),
            Err(PrintFmtError::UnknownIdent("vmemmap_base".to_string())),
            "{}",
            f.name
        );
    }
}

#[test]
fn rss_stat_prints_its_member_symbolically() {
    let f = fixture!("kmem-rss_stat");
    let raw = payload(
        &f,
        &[
            ("mm_id", 2_910_505_354),
            ("curr", 1),
            ("member", 1),
            ("size", 8192),
        ],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "mm_id=2910505354 curr=1 type=MM_ANONPAGES size=8192B"
    );
    // Unmatched: the value in hex, as the field holds it (zero-extended).
    let raw = payload(
        &f,
        &[("member", u64::from(u32::MAX)), ("size", u64::MAX)],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "mm_id=0 curr=0 type=0xffffffff size=-1B"
    );
}

#[test]
fn oom_victim() {
    let f = fixture!("oom-mark_victim");
    let raw = payload(
        &f,
        &[
            ("pid", 4242),
            ("total_vm", 1_048_576),
            ("anon_rss", 1000),
            ("file_rss", 20),
            ("uid", 1000),
            ("pgtables", 2048),
            ("oom_score_adj", u64::from(-1000i16 as u16)),
        ],
        &[("comm", "hog")],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "pid=4242 comm=hog total-vm=1048576kB anon-rss=1000kB file-rss:20kB shmem-rss:0kB \
         uid=1000 pgtables=2048kB oom_score_adj=-1000"
    );
}

#[test]
fn user_page_faults_print_addresses_by_symbol_or_hex() {
    let f = fixture!("exceptions-page_fault_user");
    let raw = payload(
        &f,
        &[
            ("address", 0x7f1c_a7d8_ee06),
            ("ip", 0x7f1c_a7d7_67ad),
            ("error_code", 6),
        ],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "address=0x7f1ca7d8ee06 ip=0x7f1ca7d767ad error_code=0x6"
    );
    // %ps: the name without the offset.
    let raw = payload(&f, &[("ip", 0xffff_ffff_8157_acd5)], &[]);
    assert_eq!(
        render(&f, &raw).unwrap(),
        "address=0x0 ip=perf_event_mmap error_code=0x0"
    );
}

#[test]
fn percpu_allocations() {
    let f = fixture!("percpu-percpu_alloc_percpu");
    let raw = payload(
        &f,
        &[
            ("call_site", 0xffff_ffff_8162_76ff),
            ("size", 16),
            ("align", 8),
            ("base_addr", 0xffff_e8ff_ffc0_0000),
            ("off", 39440),
            ("ptr", 0x6079_5bb0_2a10),
            ("bytes_alloc", 64),
            ("gfp_flags", 0xcc0),
        ],
        &[],
    );
    assert_eq!(
        render(&f, &raw).unwrap(),
        "call_site=mm_init+0x2bf reserved=0 is_atomic=0 size=16 align=8 \
         base_addr=0xffffe8ffffc00000 off=39440 ptr=0x60795bb02a10 bytes_alloc=64 \
         gfp_flags=GFP_KERNEL"
    );
}

/// Fields for hand-written formats: `a` (u32 at 8), `b` (u64 at 16), `s` (data_loc at 24),
/// `c` (char[16] at 28), `w` (u16[2] at 44 and 46).
fn fields() -> Vec<FieldFormat> {
    let f = |name: &str, offset, size, array_len| FieldFormat {
        name: name.to_string(),
        offset,
        size,
        signed: false,
        array_len,
    };
    vec![
        f("a", 8, 4, None),
        f("b", 16, 8, None),
        f("s", 24, 4, None),
        f("c", 28, 16, Some(16)),
        f("w", 44, 4, Some(2)),
    ]
}

fn raw_ab(a: u32, b: u64) -> Vec<u8> {
    let mut raw = vec![0u8; 48];
    raw[8..12].copy_from_slice(&a.to_ne_bytes());
    raw[16..24].copy_from_slice(&b.to_ne_bytes());
    raw[28..32].copy_from_slice(b"comm");
    raw[44..46].copy_from_slice(&7u16.to_ne_bytes());
    raw[46..48].copy_from_slice(&9u16.to_ne_bytes());
    raw
}

fn one(fmt: &str, raw: &[u8]) -> Result<String, PrintFmtError> {
    let pf = PrintFmt::parse(fmt, &fields())?;
    let mut out = Vec::new();
    let printk = FxHashMap::from_iter([(0xffff_ffff_8281_a424, "Start context switch".into())]);
    let kernel = Kernel {
        kallsyms: None,
        printk: Some(&printk),
    };
    pf.render(raw, kernel, &mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[test]
fn printf_conversions_match_glibc() {
    // Expected: glibc's printf with the same formats and C-cast values.
    let raw = raw_ab(u32::MAX, 42);
    let cases = [
        (
            r#""[%d][%5u][%-5u|][%05d]", REC->a, REC->b, REC->b, -42"#,
            "[-1][   42][42   |][-0042]",
        ),
        (
            r#""[%+d][%.3d][%.0d][%x]", 7, 5, 0, 255"#,
            "[+7][005][][ff]",
        ),
        (
            r#""[%#x][%#X][%#o][%o][%#.0o]", 255, 255, 8, 8, 0"#,
            "[0xff][0XFF][010][10][0]",
        ),
        (
            r#""[%08.3x][%hhx][%hd][%hu]", 0x1f, 0x1ff, REC->a, REC->a"#,
            "[     01f][ff][-1][65535]",
        ),
        (
            r#""[%u][%lu][%ld][%lld]", REC->a, -1, -1, -5"#,
            "[4294967295][18446744073709551615][-1][-5]",
        ),
        (
            r#""[%c][%5s][%-5s|][%.2s]", 65, "ab", "ab", "abcd""#,
            "[A][   ab][ab   |][ab]",
        ),
        (
            r#""[%#010x][%i][%+05d][%-+6d|][%#5o]", 0xab, -9, -3, 4, 8"#,
            "[0x000000ab][-9][-0003][+4    |][  010]",
        ),
        (
            r#""[%p][%p][%ld][%d]", 0, 0x1234, REC->a, REC->a"#,
            "[(nil)][0x1234][4294967295][-1]",
        ),
        (
            r#""%*d|%-*s|%.*s|", 4, 7, 3, "x", 2, "abc""#,
            "   7|x  |ab|",
        ),
        (
            r#""%s %s %d%%\n\t", REC->c, __get_str(s), (u8)0x1ff"#,
            "comm  255%\n\t",
        ),
        (r#""%zu %zd %Lu", -1, -1, 3"#, "18446744073709551615 -1 3"),
        // libtraceevent prints nothing for a cast, as xfs's `len ? __get_str(name) : NULL`.
        (r#""[%.*s]", 0, REC->b ? "x" : ((void *)0)"#, "[]"),
    ];
    for (fmt, want) in cases {
        assert_eq!(one(fmt, &raw).as_deref(), Ok(want), "{fmt}");
    }
}

#[test]
fn expressions_evaluate_as_libtraceevent_does() {
    let raw = raw_ab(5, 0x10);
    let cases = [
        (r#""%d", 1 + 2 * 3 - 8 / 4 % 3"#, "5"),
        (r#""%d", (1 << 4) | 1 ^ 3 & 6"#, "19"),
        (
            r#""%d %d %d", 3 > 2 && 2 >= 2, 1 < 0 || 0 <= 0, 2 == 2 != 0"#,
            "1 1 1",
        ),
        (r#""%d %d %d", !REC->a, ~0, -REC->a"#, "0 -1 -5"),
        (r#""%lx", REC->b != -1UL ? REC->b : 0"#, "10"),
        (r#""%lu", (unsigned int)-1"#, "4294967295"),
        (r#""%lu", (unsigned long)-1"#, "18446744073709551615"),
        (r#""%lx", (u16)0x12345 + (s8)0x1ff"#, "2444"),
        // Fields are read unsigned: an int field of -1 is 0xffffffff until %d casts it.
        (r#""%d %ld", (int)REC->a - 6, -REC->a > 0"#, "-1 1"),
        (r#""%s", REC->a > 4 ? "big" : "small""#, "big"),
        (r#""%d", __builtin_expect(REC->a, 0)"#, "5"),
        (r#""%c%c", 'x', '\n'"#, "x\n"),
        (r#""%s", "a" "b""#, "ab"),
        (r#""%d", 010 + 0x10 + 10ULL"#, "34"),
        (r#""%d %d", REC->w[0], REC->w[REC->a - 4]"#, "7 9"),
    ];
    for (fmt, want) in cases {
        assert_eq!(one(fmt, &raw).as_deref(), Ok(want), "{fmt}");
    }
}

#[test]
fn flags_and_symbols_follow_libtraceevent() {
    let flags =
        r#""%s", __print_flags(REC->b, "|", {1, "ONE"}, {2, "TWO"}, {3, "BOTH"}, {0, "NONE"})"#;
    assert_eq!(one(flags, &raw_ab(0, 3)).unwrap(), "ONE|TWO");
    assert_eq!(one(flags, &raw_ab(0, 0x13)).unwrap(), "ONE|TWO|0x10");
    assert_eq!(one(flags, &raw_ab(0, 0x10)).unwrap(), "0x10");
    // Zero matches no flag of value 0: only an entry libtraceevent reads as -1 prints.
    assert_eq!(one(flags, &raw_ab(0, 0)).unwrap(), "");
    let named = r#""%s", __print_flags(REC->b, "", {UNKNOWN_NAME, "ZERO"}, {4, "FOUR"})"#;
    assert_eq!(one(named, &raw_ab(0, 0)).unwrap(), "ZERO");
    assert_eq!(one(named, &raw_ab(0, 5)).unwrap(), "FOUR0x1");
    let sym =
        r#""%s", __print_symbolic(REC->b, {HI_SOFTIRQ, "HI"}, {RCU_SOFTIRQ, "RCU"}, {-1, "NEG"})"#;
    assert_eq!(one(sym, &raw_ab(0, 9)).unwrap(), "RCU");
    assert_eq!(one(sym, &raw_ab(0, 0)).unwrap(), "HI");
    assert_eq!(one(sym, &raw_ab(0, u64::MAX)).unwrap(), "NEG");
    assert_eq!(one(sym, &raw_ab(0, 7)).unwrap(), "0x7");
    // Each name through the conversion's width.
    let wide = r#""%-4s.", __print_flags(REC->b, "|", {1, "A"}, {2, "B"})"#;
    assert_eq!(one(wide, &raw_ab(0, 3)).unwrap(), "A   |B   .");
}

/// `rcu:rcu_utilization`'s `"%s", REC->s` of a `const char *s`: the file's printk format at
/// that address, else the address in bare hex.
#[test]
fn pointer_fields_print_the_kernels_string() {
    assert_eq!(
        one(r#""%8s|", REC->b"#, &raw_ab(0, 0xffff_ffff_8281_a424)).unwrap(),
        "Start context switch|"
    );
    assert_eq!(
        one(r#""%8s|", REC->b"#, &raw_ab(0, 0xffff_ffff_8281_a411)).unwrap(),
        "ffffffff8281a411|"
    );
}

#[test]
fn what_cannot_be_printed_as_perf_does_is_an_error() {
    let raw = raw_ab(0, 0);
    let cases = [
        (
            r#""%d", vmemmap_base"#,
            PrintFmtError::UnknownIdent("vmemmap_base".into()),
        ),
        (
            r#""%d", REC->nope"#,
            PrintFmtError::UnknownField("nope".into()),
        ),
        (
            r#""%d", sizeof(int)"#,
            PrintFmtError::UnsupportedFunction("sizeof".into()),
        ),
        (
            r#""%pI4", REC->b"#,
            PrintFmtError::UnsupportedConversion("%pI".into()),
        ),
        (
            r#""% d", REC->b"#,
            PrintFmtError::UnsupportedConversion("% ".into()),
        ),
        (r#""%d %d", REC->b"#, PrintFmtError::MissingArgument),
        (r#""%s", REC->a + 1"#, PrintFmtError::NotAString),
        (r#""%d", "str""#, PrintFmtError::NotANumber),
        (r#""%d", 1 / REC->b"#, PrintFmtError::DivisionByZero),
        (r#""%d", REC->w[2]"#, PrintFmtError::Truncated),
        (r#""%100000d", 1"#, PrintFmtError::Width),
    ];
    for (fmt, want) in cases {
        assert_eq!(one(fmt, &raw), Err(want), "{fmt}");
    }
    assert!(matches!(
        PrintFmt::parse("", &fields()),
        Err(PrintFmtError::Syntax(_))
    ));
}

#[test]
fn truncated_payloads_are_errors_not_panics() {
    let f = fixture!("kmem-kmem_cache_alloc");
    let raw = payload(&f, &[("node", 1)], &[("name", "kmalloc-64")]);
    let mut ok = 0;
    for n in 0..raw.len() {
        match render(&f, &raw[..n]) {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e, PrintFmtError::Truncated, "{n} bytes"),
        }
    }
    assert_eq!(ok, 0, "every prefix cuts a field or the name");
    // A data_loc that points past the payload.
    let mut bad = raw.clone();
    bad[24..28].copy_from_slice(&(0xfff0u32 | (4 << 16)).to_ne_bytes());
    assert_eq!(render(&f, &bad), Err(PrintFmtError::Truncated));
}

/// A small deterministic generator (xorshift) for the malformed-input tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn malformed_print_fmts_and_payloads_never_panic() {
    let real = [
        fixture!("kmem-kmalloc"),
        fixture!("kmem-kmem_cache_alloc"),
        fixture!("kmem-rss_stat"),
        fixture!("oom-mark_victim"),
        fixture!("syscalls-sys_enter_mmap"),
    ];
    let k = Kallsyms::from_text(KALLSYMS);
    let kernel = Kernel {
        kallsyms: Some(&k),
        printk: None,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    let mut payload = [0u8; 96];
    for f in &real {
        // Every prefix of the line, and random payloads through what parses.
        for cut in (0..f.print_fmt.len()).filter(|&c| f.print_fmt.is_char_boundary(c)) {
            let Ok(pf) = PrintFmt::parse(&f.print_fmt[..cut], &f.fields) else {
                continue;
            };
            for b in payload.iter_mut() {
                *b = rng.next() as u8;
            }
            let n = rng.below(payload.len());
            out.clear();
            let _ = pf.render(&payload[..n], kernel, &mut out);
        }
    }
    // Random token soup.
    const PIECES: [&str; 24] = [
        "\"%d\"",
        "\"%s\"",
        "\"%p\"",
        ",",
        "(",
        ")",
        "{",
        "}",
        "REC->a",
        "REC->s",
        "1UL",
        "-",
        "?",
        ":",
        "__print_flags(",
        "__print_symbolic(",
        "__get_str(",
        "\"|\"",
        "*",
        "<<",
        "(unsigned long)",
        "!",
        "x",
        "'",
    ];
    let fields = fields();
    for _ in 0..20_000 {
        let mut text = String::from("\"%s%d%lx%pS%*d%.*s\"");
        for _ in 0..rng.below(24) {
            text.push_str(PIECES[rng.below(PIECES.len())]);
            text.push(' ');
        }
        if let Ok(pf) = PrintFmt::parse(&text, &fields) {
            for b in payload.iter_mut() {
                *b = rng.next() as u8;
            }
            out.clear();
            let _ = pf.render(&payload[..rng.below(payload.len())], kernel, &mut out);
        }
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let fields = fields();
    let deep = |open: &str, close: &str| {
        format!("\"%d\", {}1{}", open.repeat(100_000), close.repeat(100_000))
    };
    for text in [
        deep("(", ")"),
        deep("-", ""),
        deep("(int)", ""),
        deep("1 ? ", " : 0"),
        format!("\"%d\", 1{}", " + 1".repeat(100_000)),
    ] {
        assert!(matches!(
            PrintFmt::parse(&text, &fields),
            Err(PrintFmtError::Syntax(_))
        ));
    }
}
