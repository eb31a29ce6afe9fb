//! The OpenTelemetry memory-profiling contract (`otel_memory:alloc(ptr, size,
//! weighted_bytes)`, read without BPF): its event's columns carry the names OpenTelemetry and
//! pprof give a memory profile's sample types, `alloc_objects` (count) and `alloc_space`
//! (bytes, the probe's weighted_bytes: `aggregate::weigh` weighs it by its third argument).

use super::profiles::StringIds;
use crate::aggregate::weigh::is_otel_memory_alloc;
use crate::output::pprof::{Profile, short};

/// Renames the columns of the contract's allocation event (`alloc`, `alloc_bytes`, as
/// `pprof::build` names an event's columns) to `alloc_objects` and `alloc_space`.
pub(super) fn name_columns(p: &mut Profile, names: &[String]) {
    let Some(alloc) = names.iter().find(|n| is_otel_memory_alloc(n)) else {
        return;
    };
    let count = short(alloc).to_string();
    let bytes = format!("{count}_bytes");
    let mut strings = StringIds::of(p);
    // New strings rather than the old ones rewritten: `alloc` may name a function too.
    let objects = strings.id(p, "alloc_objects");
    let space = strings.id(p, "alloc_space");
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
            string_table: ["", "alloc", "count", "alloc_bytes", "bytes", "page-faults"]
                .map(String::from)
                .to_vec(),
            sample_type: [(1, 2), (3, 4), (5, 2)]
                .map(|(r#type, unit)| ValueType { r#type, unit })
                .to_vec(),
            ..Profile::default()
        };
        let names = ["sdt:/app:otel_memory:alloc", "page-faults"].map(String::from);
        super::name_columns(&mut p, &names);
        let types: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(types, ["alloc_objects", "alloc_space", "page-faults"]);
        // The old string stays for whatever else named it.
        assert_eq!(p.string_table[1], "alloc");
    }
}
