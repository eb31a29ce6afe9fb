//! The kernel's and perf's binary interface, defined once: sample fields, callchain markers,
//! perf's own record types and the perf.data feature bits. Everything else imports them from
//! here (`perf_event_open_sys::bindings` has the kernel's as `u32`s of several types; these are
//! the types the parsers and writers use).

use perf_event_open_sys::bindings as b;

// `enum perf_event_sample_format` (include/uapi/linux/perf_event.h), as the u64 bits of
// `perf_event_attr::sample_type`.
pub const PERF_SAMPLE_IP: u64 = b::PERF_SAMPLE_IP as u64;
pub const PERF_SAMPLE_TID: u64 = b::PERF_SAMPLE_TID as u64;
pub const PERF_SAMPLE_TIME: u64 = b::PERF_SAMPLE_TIME as u64;
pub const PERF_SAMPLE_ADDR: u64 = b::PERF_SAMPLE_ADDR as u64;
pub const PERF_SAMPLE_READ: u64 = b::PERF_SAMPLE_READ as u64;
pub const PERF_SAMPLE_CALLCHAIN: u64 = b::PERF_SAMPLE_CALLCHAIN as u64;
/// perf_event_open's flag for a pid argument that is a cgroup directory's fd.
pub const PERF_FLAG_PID_CGROUP: u64 = b::PERF_FLAG_PID_CGROUP as u64;
pub const PERF_SAMPLE_ID: u64 = b::PERF_SAMPLE_ID as u64;
pub const PERF_SAMPLE_CPU: u64 = b::PERF_SAMPLE_CPU as u64;
pub const PERF_SAMPLE_PERIOD: u64 = b::PERF_SAMPLE_PERIOD as u64;
pub const PERF_SAMPLE_STREAM_ID: u64 = b::PERF_SAMPLE_STREAM_ID as u64;
pub const PERF_SAMPLE_RAW: u64 = b::PERF_SAMPLE_RAW as u64;
pub const PERF_SAMPLE_BRANCH_STACK: u64 = b::PERF_SAMPLE_BRANCH_STACK as u64;
pub const PERF_SAMPLE_REGS_USER: u64 = b::PERF_SAMPLE_REGS_USER as u64;
pub const PERF_SAMPLE_STACK_USER: u64 = b::PERF_SAMPLE_STACK_USER as u64;
pub const PERF_SAMPLE_WEIGHT: u64 = b::PERF_SAMPLE_WEIGHT as u64;
pub const PERF_SAMPLE_DATA_SRC: u64 = b::PERF_SAMPLE_DATA_SRC as u64;
pub const PERF_SAMPLE_IDENTIFIER: u64 = b::PERF_SAMPLE_IDENTIFIER as u64;
pub const PERF_SAMPLE_TRANSACTION: u64 = b::PERF_SAMPLE_TRANSACTION as u64;
pub const PERF_SAMPLE_REGS_INTR: u64 = b::PERF_SAMPLE_REGS_INTR as u64;
pub const PERF_SAMPLE_PHYS_ADDR: u64 = b::PERF_SAMPLE_PHYS_ADDR as u64;
pub const PERF_SAMPLE_CGROUP: u64 = b::PERF_SAMPLE_CGROUP as u64;
pub const PERF_SAMPLE_DATA_PAGE_SIZE: u64 = b::PERF_SAMPLE_DATA_PAGE_SIZE as u64;
pub const PERF_SAMPLE_CODE_PAGE_SIZE: u64 = b::PERF_SAMPLE_CODE_PAGE_SIZE as u64;
pub const PERF_SAMPLE_WEIGHT_STRUCT: u64 = b::PERF_SAMPLE_WEIGHT_STRUCT as u64;

// `enum perf_callchain_context`: the markers a callchain switches context with.
pub const PERF_CONTEXT_HV: u64 = -32i64 as u64;
pub const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;
pub const PERF_CONTEXT_GUEST: u64 = -2048i64 as u64;
pub const PERF_CONTEXT_GUEST_KERNEL: u64 = -2176i64 as u64;
pub const PERF_CONTEXT_GUEST_USER: u64 = -2560i64 as u64;
/// Every value at or above this is a context marker, not an address.
pub const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

// perf's own record types, above the kernel's (`enum perf_user_event_type` in
// tools/lib/perf/include/perf/event.h). A pipe-mode stream carries its header this way.
pub const PERF_RECORD_USER_TYPE_START: u32 = 64;
pub const PERF_RECORD_HEADER_ATTR: u32 = 64;
pub const PERF_RECORD_HEADER_EVENT_TYPE: u32 = 65;
/// Followed by the tracing data blob, of the (8-aligned) size the record holds.
pub const PERF_RECORD_HEADER_TRACING_DATA: u32 = 66;
pub const PERF_RECORD_HEADER_BUILD_ID: u32 = 67;
/// The end of a flush round: every record before it was drained before any after it.
pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;
/// Followed by the trace data, of the size the record holds.
pub const PERF_RECORD_AUXTRACE: u32 = 71;
pub const PERF_RECORD_EVENT_UPDATE: u32 = 78;
pub const PERF_RECORD_HEADER_FEATURE: u32 = 80;
pub const PERF_RECORD_COMPRESSED: u32 = 81;
pub const PERF_RECORD_COMPRESSED2: u32 = 83;

// perf.data feature sections (`HEADER_*` in perf's util/header.h): bits of the file header's
// feature bitmap, each with a section in the table after the data.
pub const HEADER_TRACING_DATA: u32 = 1;
pub const HEADER_BUILD_ID: u32 = 2;
pub const HEADER_HOSTNAME: u32 = 3;
pub const HEADER_OSRELEASE: u32 = 4;
pub const HEADER_VERSION: u32 = 5;
pub const HEADER_ARCH: u32 = 6;
pub const HEADER_NRCPUS: u32 = 7;
pub const HEADER_CPUDESC: u32 = 8;
pub const HEADER_CPUID: u32 = 9;
pub const HEADER_TOTAL_MEM: u32 = 10;
pub const HEADER_CMDLINE: u32 = 11;
pub const HEADER_EVENT_DESC: u32 = 12;
pub const HEADER_SAMPLE_TIME: u32 = 21;
pub const HEADER_CLOCKID: u32 = 23;
/// The wall-clock time at one instant of the samples' clock (perf 5.10+ writes it with -k).
pub const HEADER_CLOCK_DATA: u32 = 29;
/// Set when the records are zstd-compressed (`perf record -z`); memperf does not write it.
pub const HEADER_COMPRESSED: u32 = 27;
/// memperf's own counts. perf reads the feature bits below its `HEADER_LAST_FEATURE` (about
/// 30) and passes over the table entries of higher ones, so the last of the 256 bits is one
/// perf will not give a meaning of its own.
pub const HEADER_MEMPERF_STATS: u32 = 255;
/// memperf's marks of the samples whose user stacks were finished from the live process
/// (`perfdata::RecoveredMark`), the bit below its counts.
pub const HEADER_MEMPERF_RECOVERED: u32 = 254;

// `union perf_mem_data_src` (PERF_SAMPLE_DATA_SRC): each field's shift and its values, as
// u64s for the decoder (`datasrc`). The field widths are in `datasrc::Field`.
pub const PERF_MEM_OP_SHIFT: u32 = b::PERF_MEM_OP_SHIFT;
pub const PERF_MEM_OP_NA: u64 = b::PERF_MEM_OP_NA as u64;
pub const PERF_MEM_OP_LOAD: u64 = b::PERF_MEM_OP_LOAD as u64;
pub const PERF_MEM_OP_STORE: u64 = b::PERF_MEM_OP_STORE as u64;
pub const PERF_MEM_OP_PFETCH: u64 = b::PERF_MEM_OP_PFETCH as u64;
pub const PERF_MEM_OP_EXEC: u64 = b::PERF_MEM_OP_EXEC as u64;
pub const PERF_MEM_LVL_SHIFT: u32 = b::PERF_MEM_LVL_SHIFT;
pub const PERF_MEM_LVL_HIT: u64 = b::PERF_MEM_LVL_HIT as u64;
pub const PERF_MEM_LVL_MISS: u64 = b::PERF_MEM_LVL_MISS as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_LVL_L1: u64 = b::PERF_MEM_LVL_L1 as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_LVL_L3: u64 = b::PERF_MEM_LVL_L3 as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_LVL_REM_CCE1: u64 = b::PERF_MEM_LVL_REM_CCE1 as u64;
pub const PERF_MEM_SNOOP_SHIFT: u32 = b::PERF_MEM_SNOOP_SHIFT;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_SNOOP_NONE: u64 = b::PERF_MEM_SNOOP_NONE as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_SNOOP_HITM: u64 = b::PERF_MEM_SNOOP_HITM as u64;
pub const PERF_MEM_LOCK_SHIFT: u32 = b::PERF_MEM_LOCK_SHIFT;
pub const PERF_MEM_LOCK_NA: u64 = b::PERF_MEM_LOCK_NA as u64;
pub const PERF_MEM_LOCK_LOCKED: u64 = b::PERF_MEM_LOCK_LOCKED as u64;
pub const PERF_MEM_TLB_SHIFT: u32 = b::PERF_MEM_TLB_SHIFT;
pub const PERF_MEM_TLB_HIT: u64 = b::PERF_MEM_TLB_HIT as u64;
pub const PERF_MEM_TLB_MISS: u64 = b::PERF_MEM_TLB_MISS as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_TLB_L1: u64 = b::PERF_MEM_TLB_L1 as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_TLB_L2: u64 = b::PERF_MEM_TLB_L2 as u64;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_TLB_WK: u64 = b::PERF_MEM_TLB_WK as u64;
pub const PERF_MEM_LVLNUM_SHIFT: u32 = b::PERF_MEM_LVLNUM_SHIFT;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_LVLNUM_L3: u64 = b::PERF_MEM_LVLNUM_L3 as u64;
pub const PERF_MEM_LVLNUM_CXL: u64 = b::PERF_MEM_LVLNUM_CXL as u64;
pub const PERF_MEM_LVLNUM_IO: u64 = b::PERF_MEM_LVLNUM_IO as u64;
pub const PERF_MEM_LVLNUM_ANY_CACHE: u64 = b::PERF_MEM_LVLNUM_ANY_CACHE as u64;
pub const PERF_MEM_LVLNUM_LFB: u64 = b::PERF_MEM_LVLNUM_LFB as u64;
pub const PERF_MEM_LVLNUM_RAM: u64 = b::PERF_MEM_LVLNUM_RAM as u64;
pub const PERF_MEM_LVLNUM_PMEM: u64 = b::PERF_MEM_LVLNUM_PMEM as u64;
pub const PERF_MEM_LVLNUM_NA: u64 = b::PERF_MEM_LVLNUM_NA as u64;
pub const PERF_MEM_REMOTE_SHIFT: u32 = b::PERF_MEM_REMOTE_SHIFT;
pub const PERF_MEM_SNOOPX_SHIFT: u32 = b::PERF_MEM_SNOOPX_SHIFT;
#[cfg_attr(not(test), allow(dead_code))] // the value table, whole
pub const PERF_MEM_SNOOPX_FWD: u64 = b::PERF_MEM_SNOOPX_FWD as u64;
pub const PERF_MEM_BLK_SHIFT: u32 = b::PERF_MEM_BLK_SHIFT;
pub const PERF_MEM_BLK_NA: u64 = b::PERF_MEM_BLK_NA as u64;
pub const PERF_MEM_BLK_DATA: u64 = b::PERF_MEM_BLK_DATA as u64;
pub const PERF_MEM_BLK_ADDR: u64 = b::PERF_MEM_BLK_ADDR as u64;
pub const PERF_MEM_HOPS_SHIFT: u32 = b::PERF_MEM_HOPS_SHIFT;
