//! Building `perf_event_attr` from a plain configuration struct.

use perf_event_open_sys::bindings::{self as b, perf_event_attr};

use crate::events::Period;

/// Everything memperf sets in a `perf_event_attr`; all other fields stay zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrConfig {
    pub type_: u32,
    pub config: u64,
    /// `config1`/`config2`: the uprobe PMU's path pointer and file offset.
    pub config1: u64,
    pub config2: u64,
    /// `Count(0)` means a counting (non-sampling) event.
    pub period: Period,
    pub sample_type: u64,
    pub regs_user: u64,
    pub stack_user: u32,
    pub exclude_callchain_user: bool,
    pub exclude_callchain_kernel: bool,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    pub exclude_hv: bool,
    pub precise_ip: u8,
    pub inherit: bool,
    pub disabled: bool,
    pub enable_on_exec: bool,
    /// MMAP + MMAP2 + COMM (with `comm_exec`) + FORK/EXIT (`task`) records; not `mmap_data`.
    pub tracking: bool,
    /// With `tracking`, MMAP2 records for non-executable mappings too (`mmap_data`): perf's
    /// DWARF unwinders read `.eh_frame_hdr` through them, and fault addresses resolve to them.
    pub mmap_data: bool,
    /// With `tracking`, CGROUP records (`attr.cgroup`, 5.7+): the id and path of each cgroup
    /// made while recording, for the ids `PERF_SAMPLE_CGROUP` gives samples.
    pub cgroup_records: bool,
    /// Timestamps from CLOCK_MONOTONIC.
    pub use_clockid: bool,
    pub sample_id_all: bool,
    /// Wake the reader after this many bytes; 0 wakes it after every event.
    pub wakeup_watermark: u32,
    pub read_format: u64,
    /// `sample_max_stack` (4.8+): the deepest kernel callchain; 0 for the sysctl's.
    pub max_stack: u16,
}

impl Default for AttrConfig {
    fn default() -> Self {
        AttrConfig {
            type_: b::PERF_TYPE_SOFTWARE,
            config: 0,
            config1: 0,
            config2: 0,
            period: Period::Count(0),
            sample_type: 0,
            regs_user: 0,
            stack_user: 0,
            exclude_callchain_user: false,
            exclude_callchain_kernel: false,
            exclude_user: false,
            exclude_kernel: false,
            exclude_hv: false,
            precise_ip: 0,
            inherit: false,
            disabled: false,
            enable_on_exec: false,
            tracking: false,
            mmap_data: false,
            cgroup_records: false,
            use_clockid: false,
            sample_id_all: false,
            wakeup_watermark: 0,
            read_format: 0,
            max_stack: 0,
        }
    }
}

/// The attr size memperf passes to the kernel: the whole struct the bindings know.
pub const ATTR_SIZE: u32 = std::mem::size_of::<perf_event_attr>() as u32;

const fn bit(reg: u32) -> u64 {
    1u64 << reg
}

/// x86_64 registers DWARF unwinding needs to start: IP, SP, BP.
pub const X86_REGS_DWARF_MIN: u64 =
    bit(b::PERF_REG_X86_IP) | bit(b::PERF_REG_X86_SP) | bit(b::PERF_REG_X86_BP);

/// The x86_64 user register mask `perf record --call-graph dwarf` uses (AX..R15 minus the
/// segment registers).
pub const X86_REGS_PERF_ALL: u64 = 0xff0fff;

/// The user registers to sample for unwinding on this architecture.
pub fn user_regs_mask_for_unwind() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        X86_REGS_DWARF_MIN
    }
    #[cfg(target_arch = "aarch64")]
    {
        bit(b::PERF_REG_ARM64_PC)
            | bit(b::PERF_REG_ARM64_SP)
            | bit(b::PERF_REG_ARM64_LR)
            | bit(b::PERF_REG_ARM64_X29)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
    }
}

/// Builds the attr: `size` is the bindings' struct size, every field not in `cfg` is zero.
pub fn build_attr(cfg: &AttrConfig) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: cfg.type_,
        size: ATTR_SIZE,
        config: cfg.config,
        sample_type: cfg.sample_type,
        read_format: cfg.read_format,
        sample_regs_user: cfg.regs_user,
        sample_stack_user: cfg.stack_user,
        sample_max_stack: cfg.max_stack,
        ..perf_event_attr::default()
    };
    attr.__bindgen_anon_3.config1 = cfg.config1;
    attr.__bindgen_anon_4.config2 = cfg.config2;
    match cfg.period {
        Period::Count(n) => attr.sample_period = n,
        Period::Frequency(hz) => {
            attr.set_freq(1);
            attr.sample_freq = hz;
        }
    }
    if cfg.wakeup_watermark > 0 {
        attr.set_watermark(1);
        attr.wakeup_watermark = cfg.wakeup_watermark;
    } else {
        attr.wakeup_events = 1;
    }
    let flag = u64::from;
    attr.set_disabled(flag(cfg.disabled));
    attr.set_inherit(flag(cfg.inherit));
    attr.set_enable_on_exec(flag(cfg.enable_on_exec));
    attr.set_exclude_user(flag(cfg.exclude_user));
    attr.set_exclude_kernel(flag(cfg.exclude_kernel));
    attr.set_exclude_hv(flag(cfg.exclude_hv));
    attr.set_exclude_callchain_user(flag(cfg.exclude_callchain_user));
    attr.set_exclude_callchain_kernel(flag(cfg.exclude_callchain_kernel));
    attr.set_precise_ip(u64::from(cfg.precise_ip.min(3)));
    attr.set_sample_id_all(flag(cfg.sample_id_all));
    if cfg.tracking {
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_task(1);
        attr.set_mmap_data(flag(cfg.mmap_data));
        attr.set_cgroup(flag(cfg.cgroup_records));
    }
    if cfg.use_clockid {
        attr.set_use_clockid(1);
        attr.clockid = libc::CLOCK_MONOTONIC;
    }
    attr
}

/// The attr's `config1` (a union of u64s in the bindings: `config1`, `kprobe_func`,
/// `uprobe_path`, `bp_addr`), for the tests that check the attrs built.
#[cfg(test)]
pub fn config1_of(attr: &perf_event_attr) -> u64 {
    // SAFETY: every member of the union is a u64, so any bit pattern is a valid `config1`.
    unsafe { attr.__bindgen_anon_3.config1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perf_event_open_sys::bindings::{perf_event_header, perf_event_mmap_page};
    use std::mem::{offset_of, size_of};

    #[test]
    fn kernel_struct_layouts() {
        // The mmap control page: data_head at 1024, the data/aux fields end at 1088.
        assert_eq!(offset_of!(perf_event_mmap_page, data_head), 1024);
        assert_eq!(offset_of!(perf_event_mmap_page, data_tail), 1032);
        assert_eq!(offset_of!(perf_event_mmap_page, data_offset), 1040);
        assert_eq!(offset_of!(perf_event_mmap_page, data_size), 1048);
        assert_eq!(size_of::<perf_event_mmap_page>(), 1024 + 8 * 8);
        assert_eq!(size_of::<perf_event_header>(), 8);
        // attr: VER9 (config4) is what the bindings carry; the kernel accepts bigger sizes
        // as long as the unknown tail is zero.
        assert_eq!(ATTR_SIZE, b::PERF_ATTR_SIZE_VER9);
        assert_eq!(offset_of!(perf_event_attr, sample_regs_user), 80);
        assert_eq!(offset_of!(perf_event_attr, sample_stack_user), 88);
        assert_eq!(offset_of!(perf_event_attr, clockid), 92);
    }

    #[test]
    fn register_masks() {
        assert_eq!(X86_REGS_DWARF_MIN, (1 << 6) | (1 << 7) | (1 << 8));
        assert_eq!(X86_REGS_PERF_ALL & X86_REGS_DWARF_MIN, X86_REGS_DWARF_MIN);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(user_regs_mask_for_unwind(), X86_REGS_DWARF_MIN);
    }

    #[test]
    fn sampling_attr() {
        let cfg = AttrConfig {
            type_: b::PERF_TYPE_SOFTWARE,
            config: u64::from(b::PERF_COUNT_SW_PAGE_FAULTS),
            period: Period::Count(1),
            sample_type: u64::from(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TID),
            regs_user: X86_REGS_DWARF_MIN,
            stack_user: 8192,
            exclude_kernel: true,
            disabled: true,
            enable_on_exec: true,
            inherit: true,
            tracking: true,
            use_clockid: true,
            sample_id_all: true,
            ..AttrConfig::default()
        };
        let attr = build_attr(&cfg);
        assert_eq!(attr.size, ATTR_SIZE);
        assert_eq!(attr.type_, 1);
        assert_eq!(attr.config, 2);
        assert_eq!(attr.sample_period, 1);
        assert_eq!(attr.freq(), 0);
        assert_eq!(attr.sample_type, 3);
        assert_eq!(attr.sample_regs_user, X86_REGS_DWARF_MIN);
        assert_eq!(attr.sample_stack_user, 8192);
        assert_eq!(attr.exclude_kernel(), 1);
        assert_eq!(attr.exclude_user(), 0);
        assert_eq!(
            (attr.disabled(), attr.enable_on_exec(), attr.inherit()),
            (1, 1, 1)
        );
        assert_eq!(
            (
                attr.mmap(),
                attr.mmap2(),
                attr.comm(),
                attr.comm_exec(),
                attr.task()
            ),
            (1, 1, 1, 1, 1)
        );
        assert_eq!(attr.mmap_data(), 0);
        assert_eq!(attr.use_clockid(), 1);
        assert_eq!(attr.clockid, libc::CLOCK_MONOTONIC);
        assert_eq!(attr.sample_id_all(), 1);
        assert_eq!(attr.wakeup_events, 1);
        assert_eq!(attr.watermark(), 0);
    }

    #[test]
    fn frequency_and_watermark() {
        let cfg = AttrConfig {
            period: Period::Frequency(4000),
            wakeup_watermark: 65536,
            precise_ip: 2,
            ..AttrConfig::default()
        };
        let attr = build_attr(&cfg);
        assert_eq!(attr.freq(), 1);
        assert_eq!(attr.sample_freq, 4000);
        assert_eq!(attr.watermark(), 1);
        assert_eq!(attr.wakeup_watermark, 65536);
        assert_eq!(attr.precise_ip(), 2);
        assert_eq!((attr.mmap(), attr.mmap2(), attr.use_clockid()), (0, 0, 0));
    }
}
