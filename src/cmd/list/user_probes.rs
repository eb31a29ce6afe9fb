//! `memperf list -x FILE --probes`: the USDT probes and the functions of one object file, as
//! the `sdt:` and `u:` event specs that name them (perf's `perf probe -x FILE -F` and
//! `perf list sdt`, BCC's `tplist -l FILE`).

use std::io::Write;
use std::path::Path;

use anyhow::{Result, anyhow};

use crate::events::glob_match;
use crate::probes::{resolve, usdt};

/// Writes the probes of `path` that match `filter` (a glob or a substring; all when empty).
pub(super) fn write(out: &mut dyn Write, path: &Path, filter: &[String]) -> Result<()> {
    let data = resolve::read(path)?;
    let file = object::File::parse(&*data)
        .map_err(|e| anyhow!("`{}` is not an ELF object: {e}", path.display()))?;
    let shown = |name: &str| {
        filter.is_empty()
            || filter.iter().any(|f| {
                glob_match(f, name) || (!crate::events::is_glob(f) && name.contains(f.as_str()))
            })
    };
    let target = path.display();
    let notes: Vec<usdt::Note> = usdt::notes(&file)
        .into_iter()
        .filter(|n| shown(&n.name) || shown(&format!("{}:{}", n.provider, n.name)))
        .collect();
    writeln!(out, "USDT probes in {target} ({}):", notes.len())?;
    for n in &notes {
        let guard = if n.semaphore == 0 {
            String::new()
        } else {
            // The kernel counts the semaphore up while a probe is on it (4.20+).
            format!("  semaphore {:#x}", n.semaphore)
        };
        writeln!(
            out,
            "  sdt:{target}:{}:{}  [USDT]  {:#x}{guard}  args: {}",
            n.provider,
            n.name,
            n.pc,
            if n.args.is_empty() { "none" } else { &n.args }
        )?;
    }
    let funcs: Vec<(String, u64, u64)> = resolve::functions(&file)
        .into_iter()
        .filter(|(name, _, _)| shown(name))
        .collect();
    writeln!(out, "\nFunctions in {target} ({}):", funcs.len())?;
    for (name, addr, size) in &funcs {
        writeln!(
            out,
            "  u:{target}:{name}  [Uprobe]  {addr:#x}  {size} bytes"
        )?;
    }
    Ok(())
}
