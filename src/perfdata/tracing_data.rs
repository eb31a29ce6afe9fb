//! The TRACING_DATA feature: tracepoint formats in the layout of perf's trace-event-info.c
//! (version 0.6), which `perf script` needs to decode tracepoint fields.

/// One tracepoint's tracefs `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracepointFormat {
    pub system: String,
    pub name: String,
    pub format: Vec<u8>,
}

fn put_sized_u64(v: &mut Vec<u8>, data: &[u8]) {
    v.extend_from_slice(&(data.len() as u64).to_ne_bytes());
    v.extend_from_slice(data);
}

/// Builds the TRACING_DATA blob: magic, version "0.6", endianness, sizeof(long), page size,
/// header_page, header_event, no ftrace formats, the event systems with their formats (in the
/// order of first appearance), empty kallsyms, the kernel's printk formats (tracefs
/// `printk_formats`, the strings `const char *` fields point to), and no saved cmdlines.
pub fn tracing_data(
    header_page: &[u8],
    header_event: &[u8],
    formats: &[TracepointFormat],
    printk_formats: &[u8],
) -> Vec<u8> {
    let mut v = vec![0x17, 0x08, 0x44];
    v.extend_from_slice(b"tracing");
    v.extend_from_slice(b"0.6\0");
    v.push(u8::from(cfg!(target_endian = "big")));
    v.push(std::mem::size_of::<std::ffi::c_long>() as u8);
    v.extend_from_slice(&page_size().to_ne_bytes());

    v.extend_from_slice(b"header_page\0");
    put_sized_u64(&mut v, header_page);
    v.extend_from_slice(b"header_event\0");
    put_sized_u64(&mut v, header_event);

    v.extend_from_slice(&0u32.to_ne_bytes()); // ftrace event formats

    let mut systems: Vec<&str> = Vec::new();
    for f in formats {
        if !systems.contains(&f.system.as_str()) {
            systems.push(&f.system);
        }
    }
    v.extend_from_slice(&(systems.len() as u32).to_ne_bytes());
    for sys in systems {
        v.extend_from_slice(sys.as_bytes());
        v.push(0);
        let events: Vec<&TracepointFormat> = formats.iter().filter(|f| f.system == sys).collect();
        v.extend_from_slice(&(events.len() as u32).to_ne_bytes());
        for e in events {
            put_sized_u64(&mut v, &e.format);
        }
    }

    v.extend_from_slice(&0u32.to_ne_bytes()); // kallsyms
    // perf's layout: a u32 size, then the file's text.
    v.extend_from_slice(&(printk_formats.len() as u32).to_ne_bytes());
    v.extend_from_slice(printk_formats);
    v.extend_from_slice(&0u64.to_ne_bytes()); // saved cmdlines
    v
}

/// The page size, from the ELF auxiliary vector as exposed in /proc; 4096 if unreadable.
fn page_size() -> u32 {
    const AT_PAGESZ: u64 = 6;
    let Ok(auxv) = std::fs::read("/proc/self/auxv") else {
        return 4096;
    };
    auxv.chunks_exact(16)
        .find_map(|pair| {
            let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
            let val = u64::from_ne_bytes(pair[8..].try_into().ok()?);
            (key == AT_PAGESZ)
                .then(|| u32::try_from(val).ok())
                .flatten()
        })
        .unwrap_or(4096)
}

/// One field of a tracepoint's raw record, from its `format` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldFormat {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
    /// The element count of an array (`args[6]`: 6, `buf[]`: 0); `None` for a scalar.
    pub array_len: Option<usize>,
}

impl FieldFormat {
    /// The field's value in a sample's raw data (native endian; integers up to 8 bytes).
    pub fn read(&self, raw: &[u8]) -> Option<u64> {
        let b = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut buf = [0u8; 8];
        match self.size {
            1 | 2 | 4 | 8 => buf[..self.size].copy_from_slice(b),
            _ => return None,
        }
        Some(u64::from_ne_bytes(buf))
    }
}

/// A tracepoint's layout: its id (the attr's `config`), name and fields, and how the
/// kernel prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    pub id: u64,
    pub name: String,
    pub fields: Vec<FieldFormat>,
    /// The text after `print fmt:` (empty if the format has none).
    pub print_fmt: String,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&FieldFormat> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Parses one `format` file's text.
    pub fn parse(text: &str) -> Option<EventFormat> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = String::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                name = Some(n.trim().to_string());
            } else if let Some(i) = line.strip_prefix("ID:") {
                id = i.trim().parse().ok();
            } else if line.starts_with("field:") {
                fields.extend(parse_field(line));
            } else if let Some(p) = line.strip_prefix("print fmt:") {
                print_fmt = p.trim().to_string();
                // A string literal may hold a newline (ext4_fc_stats): the line goes on.
                while in_string(&print_fmt)
                    && let Some(next) = lines.next()
                {
                    print_fmt.push('\n');
                    print_fmt.push_str(next);
                }
                break;
            }
        }
        Some(EventFormat {
            id: id?,
            name: name?,
            fields,
            print_fmt,
        })
    }
}

/// Whether `text` ends inside a string literal.
fn in_string(text: &str) -> bool {
    let mut chars = text.chars();
    let mut inside = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' if inside => {
                chars.next();
            }
            '"' => inside = !inside,
            // A character literal, `'"'` included.
            '\'' if !inside => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '\'' => break,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    inside
}

/// `field:unsigned long len;\toffset:24;\tsize:8;\tsigned:0;`
fn parse_field(line: &str) -> Option<FieldFormat> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';') {
        let part = part.trim();
        if let Some(d) = part.strip_prefix("field:") {
            decl = Some(d.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    // The name is the declaration's last word, without an array suffix.
    let last = decl?.split_whitespace().last()?;
    let (name, array_len) = match last.split_once('[') {
        Some((name, len)) => (name, Some(len.trim_end_matches(']').parse().unwrap_or(0))),
        None => (last, None),
    };
    Some(FieldFormat {
        name: name.trim_start_matches('*').to_string(),
        offset: offset?,
        size: size?,
        signed,
        array_len,
    })
}

/// Every event format in a TRACING_DATA blob, found by its text (`name:`, `ID:`,
/// `format:` lines), which is how both perf's and memperf's blobs store them.
pub fn parse_event_formats(blob: &[u8]) -> Vec<EventFormat> {
    let text = String::from_utf8_lossy(blob);
    let mut out = Vec::new();
    let mut rest: &str = &text;
    while let Some(at) = format_start(rest, 0) {
        let chunk = &rest[at..];
        let end = format_start(chunk, 1).unwrap_or(chunk.len());
        if let Some(f) = EventFormat::parse(&chunk[..end]) {
            out.push(f);
        }
        rest = &chunk[end..];
    }
    out
}

/// Where the next format starts at or after `from`: a `name: ` line at the start of the
/// text or after a byte that is no text (its size before it), not one inside a print fmt
/// (`"filename: %s"`).
fn format_start(text: &str, from: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = from;
    while let Some(n) = text.get(i..)?.find("name: ") {
        let at = i + n;
        if at == 0 || !b[at - 1].is_ascii_graphic() && b[at - 1] != b' ' {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

/// The kernel's printk formats in a TRACING_DATA blob, address to text: perf stores
/// /sys/kernel/tracing/printk_formats (`0xffffffff8281a424 : "Start context switch"`
/// lines), the strings that `const char *` tracepoint fields point to. The text is kept as
/// libtraceevent keeps it: without its quotes and a trailing `\n`.
pub fn parse_printk_formats(blob: &[u8]) -> Vec<(u64, String)> {
    let text = String::from_utf8_lossy(blob);
    text.split(['\n', '\0'])
        .filter_map(|line| {
            let (addr, fmt) = line.strip_prefix("0x")?.split_once(" : \"")?;
            let addr = u64::from_str_radix(addr, 16).ok()?;
            let fmt = fmt.strip_suffix('"').unwrap_or(fmt);
            let fmt = fmt.strip_suffix("\\n").unwrap_or(fmt);
            Some((addr, fmt.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod format_tests {
    use super::*;

    const BRK: &str = "name: sys_enter_brk\nID: 695\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:unsigned long brk;\toffset:16;\tsize:8;\tsigned:0;\n\nprint fmt: \"brk: 0x%08lx\", ((unsigned long)(REC->brk))\n";

    #[test]
    fn parses_fields_and_reads_values() {
        let f = EventFormat::parse(BRK).unwrap();
        assert_eq!((f.id, f.name.as_str()), (695, "sys_enter_brk"));
        let brk = f.field("brk").unwrap();
        assert_eq!((brk.offset, brk.size, brk.signed), (16, 8, false));
        assert!(f.field("__syscall_nr").unwrap().signed);
        assert_eq!(brk.array_len, None);
        let args = parse_field("field:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;");
        assert_eq!(
            args.map(|a| (a.name, a.size, a.array_len)),
            Some(("args".to_string(), 48, Some(6)))
        );
        let mut raw = vec![0u8; 24];
        raw[16..24].copy_from_slice(&0x5555_0000u64.to_ne_bytes());
        assert_eq!(brk.read(&raw), Some(0x5555_0000));
        assert_eq!(brk.read(&raw[..20]), None, "short raw data");
    }

    #[test]
    fn finds_every_format_in_a_blob() {
        let mut blob = b"\x17\x08\x44tracing0.6\0junk\0".to_vec();
        blob.extend_from_slice(BRK.as_bytes());
        blob.extend_from_slice(b"\0\0\0\x08");
        blob.extend_from_slice(
            BRK.replace("695", "696")
                .replace("_brk", "_mmap")
                .as_bytes(),
        );
        let all = parse_event_formats(&blob);
        assert_eq!(all.len(), 2);
        assert_eq!((all[1].id, all[1].name.as_str()), (696, "sys_enter_mmap"));
        assert_eq!(
            all[0].print_fmt,
            r#""brk: 0x%08lx", ((unsigned long)(REC->brk))"#
        );
    }

    #[test]
    fn a_print_fmt_goes_on_while_a_string_holds_a_newline() {
        let text = "name: ext4_fc_stats\nID: 9\nformat:\n\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"a \\\"q\\\" b:\n%d end\", REC->x\n";
        let f = EventFormat::parse(text).unwrap();
        assert_eq!(f.print_fmt, "\"a \\\"q\\\" b:\n%d end\", REC->x");
        assert!(!in_string(r#""a\\" x"#));
        assert!(in_string(r#""a\" x"#));
        assert!(!in_string(r#""%c", '"'"#));
    }

    #[test]
    fn finds_the_printk_formats() {
        let mut blob = b"\x17\x08\x44tracing0.6\0".to_vec();
        blob.extend_from_slice(BRK.as_bytes());
        blob.extend_from_slice(&[0, 0, 0, 0, 0x2a, 0, 0, 0]);
        blob.extend_from_slice(b"0xffffffff8281a424 : \"Start context switch\"\n");
        blob.extend_from_slice(b"0xffffffff82521880 : \"mt_find\"\n");
        blob.extend_from_slice(b"0xffffffff82500000 : \"a: %d\\n\"\n\0\0");
        assert_eq!(
            parse_printk_formats(&blob),
            [
                (0xffff_ffff_8281_a424, "Start context switch".to_string()),
                (0xffff_ffff_8252_1880, "mt_find".to_string()),
                (0xffff_ffff_8250_0000, "a: %d".to_string()),
            ]
        );
    }

    /// `filename: ` in a print fmt used to end the format there and start no other.
    #[test]
    fn a_name_inside_a_print_fmt_starts_no_format() {
        let access = "name: sys_enter_access\nID: 700\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:const char * filename;\toffset:16;\tsize:8;\tsigned:0;\n\nprint fmt: \"filename: 0x%08lx\", ((unsigned long)(REC->filename))\n";
        let mut blob = b"\x17\x08\x44tracing0.6\0".to_vec();
        for f in [access, BRK] {
            blob.extend_from_slice(&(f.len() as u64).to_le_bytes());
            blob.extend_from_slice(f.as_bytes());
        }
        let all = parse_event_formats(&blob);
        let names: Vec<&str> = all.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["sys_enter_access", "sys_enter_brk"]);
        assert_eq!(
            all[0].print_fmt,
            r#""filename: 0x%08lx", ((unsigned long)(REC->filename))"#
        );
    }
}
