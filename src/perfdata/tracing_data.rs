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
/// order of first appearance), and empty kallsyms, printk formats and saved cmdlines.
pub fn tracing_data(
    header_page: &[u8],
    header_event: &[u8],
    formats: &[TracepointFormat],
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
    v.extend_from_slice(&0u32.to_ne_bytes()); // printk formats
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
