//! Kernel mode: the kmem (and percpu) tracepoints, their fields read from the formats.

use std::ffi::CString;

use anyhow::{Context, Result, anyhow, bail};

use crate::config::leak::LeakConfig;
use crate::config::record::CallGraph;
use crate::events::{EventKind, EventSpec, Modifiers, Period};
use crate::perfdata::tracing_data::{EventFormat, FieldFormat};
use crate::sys::tracefs::Tracefs;

use super::plan::Planned;
use super::sink::{KernelSize, Role};
use super::table::{KERNEL_PAGES, KERNEL_PERCPU, KERNEL_SLAB, Space};
use crate::live::open;

/// One kernel allocator event: tracepoint, whether it must exist, its role's fields.
struct KernelEventDef {
    /// `system:name`.
    event: &'static str,
    /// The Linux version that added it (by this name).
    since: &'static str,
    required: bool,
    space: Space,
    addr: &'static str,
    /// Some for allocations: the size field, and whether it is a page order.
    size: Option<(&'static str, bool)>,
}

const fn kdef(
    event: &'static str,
    since: &'static str,
    required: bool,
    space: Space,
    addr: &'static str,
    size: Option<(&'static str, bool)>,
) -> KernelEventDef {
    KernelEventDef {
        event,
        since,
        required,
        space,
        addr,
        size,
    }
}

const KERNEL_EVENTS: &[KernelEventDef] = &[
    kdef(
        "kmem:kmalloc",
        "2.6.32",
        true,
        KERNEL_SLAB,
        "ptr",
        Some(("bytes_alloc", false)),
    ),
    kdef(
        "kmem:kmalloc_node",
        "2.6.32",
        false,
        KERNEL_SLAB,
        "ptr",
        Some(("bytes_alloc", false)),
    ),
    kdef(
        "kmem:kmem_cache_alloc",
        "2.6.32",
        true,
        KERNEL_SLAB,
        "ptr",
        Some(("bytes_alloc", false)),
    ),
    kdef(
        "kmem:kmem_cache_alloc_node",
        "2.6.32",
        false,
        KERNEL_SLAB,
        "ptr",
        Some(("bytes_alloc", false)),
    ),
    kdef("kmem:kfree", "2.6.32", true, KERNEL_SLAB, "ptr", None),
    kdef(
        "kmem:kmem_cache_free",
        "2.6.32",
        true,
        KERNEL_SLAB,
        "ptr",
        None,
    ),
    kdef(
        "kmem:mm_page_alloc",
        "2.6.32",
        true,
        KERNEL_PAGES,
        "pfn",
        Some(("order", true)),
    ),
    kdef("kmem:mm_page_free", "3.3", true, KERNEL_PAGES, "pfn", None),
];

const PERCPU_EVENTS: &[KernelEventDef] = &[
    kdef(
        "percpu:percpu_alloc_percpu",
        "4.13",
        true,
        KERNEL_PERCPU,
        "ptr",
        Some(("bytes_alloc", false)),
    ),
    kdef(
        "percpu:percpu_free_percpu",
        "4.13",
        true,
        KERNEL_PERCPU,
        "ptr",
        None,
    ),
];

/// The kernel-mode events as a tool's wants, for `memperf list`: the percpu ones are
/// optional, read only with `--percpu`.
pub(crate) fn wants() -> Vec<crate::tool::Want> {
    KERNEL_EVENTS
        .iter()
        .map(|d| (d, !d.required))
        .chain(PERCPU_EVENTS.iter().map(|d| (d, true)))
        .map(|(d, optional)| crate::tool::Want {
            name: d.event,
            since: d.since,
            optional,
            filter: None,
        })
        .collect()
}

/// The kernel-mode events, with their fields read from the tracepoint formats.
pub(crate) fn plan(cfg: &LeakConfig) -> Result<Vec<Planned>> {
    let tfs = Tracefs::locate_or_mount().context("failed to open the kmem tracepoints")?;
    let mut planned = Vec::new();
    let defs = KERNEL_EVENTS
        .iter()
        .chain(if cfg.percpu { PERCPU_EVENTS } else { &[] });
    for d in defs {
        let full = d.event.to_string();
        let (system, name) = d.event.split_once(':').unwrap_or(("", d.event));
        let format = match tfs.format(system, name) {
            Ok(f) => f,
            Err(_) if !d.required => continue,
            Err(e) => bail!("failed to open tracepoint `{full}`: {e}"),
        };
        let text = String::from_utf8_lossy(&format);
        let ef = EventFormat::parse(&text)
            .ok_or_else(|| anyhow!("failed to parse the format of tracepoint `{full}`"))?;
        let field = |name: &str| -> Result<FieldFormat> {
            ef.field(name)
                .cloned()
                .ok_or_else(|| anyhow!("tracepoint `{full}` has no field `{name}`"))
        };
        let addr = field(d.addr)?;
        let (role, filter, period) = match d.size {
            Some((size_name, is_order)) => {
                let f = field(size_name)?;
                let filter = if is_order {
                    None
                } else {
                    size_filter(size_name, cfg.min_size, cfg.max_size)
                };
                let size = if is_order {
                    KernelSize::PageOrder(f)
                } else {
                    KernelSize::Field(f)
                };
                (
                    Role::KernelAlloc {
                        space: d.space,
                        addr,
                        size,
                    },
                    filter,
                    cfg.sample_rate,
                )
            }
            None => (
                Role::KernelFree {
                    space: d.space,
                    addr,
                },
                None,
                1,
            ),
        };
        let alloc = matches!(role, Role::KernelAlloc { .. });
        planned.push(Planned {
            spec: EventSpec {
                name: full,
                kind: EventKind::Tracepoint {
                    system: system.to_string(),
                    name: name.to_string(),
                },
                modifiers: Modifiers::default(),
                terms: Default::default(),
                filter: None,
            },
            role,
            sampling: Some(open::Sampling {
                call_graph: CallGraph::None,
                regs: 0,
                kernel_chain: alloc,
                raw: true,
                period: Period::Count(period),
                keep_stack: false,
            }),
            filter,
        });
    }
    Ok(planned)
}

/// `-z`/`-Z` as an in-kernel tracepoint filter on the size field.
fn size_filter(field: &str, min: Option<u64>, max: Option<u64>) -> Option<CString> {
    let text = match (min, max) {
        (None, None) => return None,
        (Some(lo), None) => format!("{field} >= {lo}"),
        (None, Some(hi)) => format!("{field} <= {hi}"),
        (Some(lo), Some(hi)) => format!("{field} >= {lo} && {field} <= {hi}"),
    };
    CString::new(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_filters_are_tracepoint_filter_expressions() {
        assert_eq!(size_filter("bytes_alloc", None, None), None);
        assert_eq!(
            size_filter("bytes_alloc", Some(4096), Some(65536))
                .as_deref()
                .map(|c| c.to_string_lossy().into_owned()),
            Some("bytes_alloc >= 4096 && bytes_alloc <= 65536".to_string())
        );
    }
}
