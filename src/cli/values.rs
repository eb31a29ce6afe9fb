//! The command-line spellings of the configs' enums: clap's `ValueEnum` for each, here so
//! that `config` knows nothing of clap. A variant's help is what `--help` and the man
//! pages print beside its name.

use clap::ValueEnum;
use clap::builder::PossibleValue;

use crate::config::heap::HeapMetric;
use crate::config::leak::{LeakSort, ProbeVia};
use crate::config::record::{Consume, UnwindWhen};
use crate::config::report::{ByKey, ScriptField, TreeOrder, Weight};
use crate::config::slab::SlabSort;

/// `ValueEnum` for a config enum: each variant with its name on the command line and, when
/// given, its help.
macro_rules! value_enum {
    ($ty:ident { $($variant:ident => $name:literal $(: $help:literal)?),+ $(,)? }) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($ty::$variant),+]
            }

            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(match self {
                    $($ty::$variant => PossibleValue::new($name)$(.help($help))?),+
                })
            }
        }
    };
}

value_enum!(UnwindWhen {
    Online => "online": "While recording; the file holds callchains only",
    Offline => "offline": "Later, by the reader; the file holds raw registers and stack bytes",
});

value_enum!(Consume {
    All => "all": "Parse, unwind and write every record",
    None => "none": "Only advance the ring buffer tail",
});

value_enum!(ScriptField {
    Comm => "comm",
    Pid => "pid",
    Tid => "tid",
    Cpu => "cpu",
    Time => "time",
    Period => "period",
    Event => "event",
    Addr => "addr",
    Trace => "trace",
    Ip => "ip",
    Sym => "sym",
    Symoff => "symoff",
    Dso => "dso",
    DataSrc => "data_src":
        "PERF_SAMPLE_DATA_SRC, in hex and decoded (`|OP LOAD|LVL L1 hit|...`), as perf",
    Weight => "weight": "PERF_SAMPLE_WEIGHT, or a WEIGHT_STRUCT's access latency (var1)",
    InsLat => "ins_lat": "A WEIGHT_STRUCT's instruction latency (var2)",
});

value_enum!(Weight {
    Count => "count",
    Bytes => "bytes",
});

value_enum!(TreeOrder {
    Caller => "caller": "From the roots (`main`, `_start`) down to the functions that sampled",
    Callee => "callee": "From the functions that sampled up to their callers",
});

value_enum!(ByKey {
    Mapping => "mapping":
        "Each mapping the fault address falls in (file, //anon, [heap], [stack], huge pages)",
    File => "file": "The file behind the mapping (all anonymous memory as //anon)",
    Comm => "comm": "The thread's command name",
    Pid => "pid": "The process",
});

value_enum!(SlabSort {
    Name => "name",
    Count => "count",
    Size => "size",
});

value_enum!(ProbeVia {
    Auto => "auto": "tracefs uprobe_events where it is writable, else the uprobe PMU",
    Tracefs => "tracefs":
        "tracefs uprobe_events (3.5+): one kernel consumer per probe, shared by every event",
    Pmu => "pmu": "The uprobe PMU (4.17+): a consumer per opened event, for hosts without tracefs",
});

value_enum!(LeakSort {
    Size => "size",
    Count => "count",
});

value_enum!(HeapMetric {
    Peak => "peak": "Live bytes at the peak",
    Temporary => "temporary": "Temporary allocations (heaptrack's rule), counted",
    Leaked => "leaked": "Bytes still live at the end",
    Allocations => "allocations": "Every allocation, counted",
    AllocatedBytes => "allocated-bytes": "Bytes allocated over the run",
});
