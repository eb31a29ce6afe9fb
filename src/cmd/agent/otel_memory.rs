//! The OpenTelemetry memory-profiling contract (`otel_memory:alloc(ptr, size,
//! weighted_bytes)`, `otel_memory:free(ptr)`, read without BPF): its events' columns carry
//! the names OpenTelemetry and pprof give a memory profile's sample types, `alloc_objects`
//! (count) and `alloc_space` (bytes, the probe's weighted_bytes: `aggregate::weigh` weighs
//! it by its third argument), and, where the free probe is opened too, `inuse_objects` and
//! `inuse_space` (the free event's columns, which `aggregate::inuse` fills with the blocks
//! in use at the window's end).

use super::profiles::StringIds;
use crate::aggregate::weigh::{is_otel_memory_alloc, is_otel_memory_free};
use crate::config::record::CallGraph;
use crate::live::open::ResolvedEvent;
use crate::output::pprof::{Profile, short};

/// With the contract's allocation event beside it, a free's stack is never used (its block
/// keeps its allocation's stack): its event copies none, at any of its sites, as
/// `allocs::plan` opens free's.
pub(super) fn free_without_stack(events: &mut [ResolvedEvent]) {
    if !events.iter().any(|e| is_otel_memory_alloc(&e.spec.name)) {
        return;
    }
    let frees: Vec<bool> = (0..events.len())
        .map(|i| {
            let first = events[i].first_site.unwrap_or(i);
            events
                .get(first)
                .is_some_and(|e| is_otel_memory_free(&e.spec.name))
        })
        .collect();
    for (e, _) in events.iter_mut().zip(frees).filter(|(_, free)| *free) {
        e.spec.terms.call_graph = Some(CallGraph::None);
    }
}

/// Renames the columns of the contract's allocation event (`alloc`, `alloc_bytes`, as
/// `pprof::build` names an event's columns) to `alloc_objects` and `alloc_space`, and with
/// `inuse` (the in-use table is kept) its free event's to `inuse_objects` and `inuse_space`.
pub(super) fn name_columns(p: &mut Profile, names: &[String], inuse: bool) {
    if let Some(alloc) = names.iter().find(|n| is_otel_memory_alloc(n)) {
        rename(p, short(alloc), "alloc_objects", "alloc_space");
    }
    if let Some(free) = names.iter().find(|n| is_otel_memory_free(n))
        && inuse
    {
        rename(p, short(free), "inuse_objects", "inuse_space");
    }
}

/// Renames event `short`'s count and bytes columns.
fn rename(p: &mut Profile, short: &str, to_count: &str, to_bytes: &str) {
    let count = short.to_string();
    let bytes = format!("{count}_bytes");
    let mut strings = StringIds::of(p);
    // New strings rather than the old ones rewritten: `alloc` may name a function too.
    let objects = strings.id(p, to_count);
    let space = strings.id(p, to_bytes);
    for i in 0..p.sample_type.len() {
        let ty = p
            .string_table
            .get(p.sample_type[i].r#type as usize)
            .map(String::as_str);
        if ty == Some(count.as_str()) {
            p.sample_type[i].r#type = objects;
        } else if ty == Some(bytes.as_str()) {
            p.sample_type[i].r#type = space;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::output::pprof::{Profile, ValueType};

    #[test]
    fn the_contracts_columns_are_named_as_pprof_names_a_heaps() {
        let mut p = Profile {
            string_table: [
                "",
                "alloc",
                "count",
                "alloc_bytes",
                "bytes",
                "page-faults",
                "free",
                "free_bytes",
            ]
            .map(String::from)
            .to_vec(),
            sample_type: [(1, 2), (3, 4), (5, 2), (6, 2), (7, 4)]
                .map(|(r#type, unit)| ValueType { r#type, unit })
                .to_vec(),
            ..Profile::default()
        };
        let names = [
            "sdt:/app:otel_memory:alloc",
            "page-faults",
            "sdt:/app:otel_memory:free",
        ]
        .map(String::from);
        let mut without = p.clone();
        super::name_columns(&mut without, &names, false);
        super::name_columns(&mut p, &names, true);
        let types: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(
            types,
            [
                "alloc_objects",
                "alloc_space",
                "page-faults",
                "inuse_objects",
                "inuse_space"
            ]
        );
        // Without the in-use table, free's columns are its own.
        let t = &without.sample_type[3];
        assert_eq!(without.string_table[t.r#type as usize], "free");
        // The old string stays for whatever else named it.
        assert_eq!(p.string_table[1], "alloc");
    }
}
