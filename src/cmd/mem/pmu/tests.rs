#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use super::*;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// An Intel `cpu` PMU with Skylake's mem events, and `mem-loads-aux` when `aux`.
fn intel(dir: &Path, pmu: &str, aux: bool) {
    write(dir, &format!("{pmu}/type"), "4\n");
    write(dir, &format!("{pmu}/format/event"), "config:0-7\n");
    write(dir, &format!("{pmu}/format/umask"), "config:8-15\n");
    write(dir, &format!("{pmu}/format/ldlat"), "config1:0-15\n");
    write(
        dir,
        &format!("{pmu}/events/mem-loads"),
        "event=0xcd,umask=0x1,ldlat=3\n",
    );
    write(
        dir,
        &format!("{pmu}/events/mem-stores"),
        "event=0xd0,umask=0x82\n",
    );
    if aux {
        write(
            dir,
            &format!("{pmu}/events/mem-loads-aux"),
            "event=0x03,umask=0x82\n",
        );
    }
}

const KERNEL: (u32, u32) = (6, 18);
const BOTH: Types = Types {
    loads: true,
    stores: true,
};

#[test]
fn intel_loads_and_stores() {
    let d = tempfile::tempdir().unwrap();
    intel(d.path(), "cpu", false);
    let pmu = discover(d.path(), 30).unwrap();
    let evs = events(&pmu, BOTH, 30, KERNEL).unwrap();
    let names: Vec<&str> = evs.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["cpu/mem-loads,ldlat=30/P", "cpu/mem-stores/P"]);
    // ldlat replaces the event's own 3.
    assert_eq!(
        evs[0].event,
        PmuEvent {
            type_: 4,
            config: 0x1cd,
            config1: 30,
            config2: 0
        }
    );
    assert_eq!((evs[1].event.config, evs[1].event.config1), (0x82d0, 0));
    assert!(
        evs.iter()
            .all(|e| e.precise_ip == 3 && !e.group_leader_only)
    );
    let st = evs[0].sample_type;
    for bit in [
        PERF_SAMPLE_ADDR,
        PERF_SAMPLE_DATA_SRC,
        PERF_SAMPLE_WEIGHT_STRUCT,
        PERF_SAMPLE_PHYS_ADDR,
        PERF_SAMPLE_DATA_PAGE_SIZE,
    ] {
        assert_ne!(st & bit, 0, "{bit:#x}");
    }
    assert_eq!(st & PERF_SAMPLE_WEIGHT, 0);
}

#[test]
fn intel_load_latency_led_by_mem_loads_aux() {
    let d = tempfile::tempdir().unwrap();
    intel(d.path(), "cpu_core", true);
    let pmu = discover(d.path(), 50).unwrap();
    let loads = Types {
        loads: true,
        stores: false,
    };
    let evs = events(&pmu, loads, 50, KERNEL).unwrap();
    assert_eq!(evs.len(), 2);
    assert_eq!(evs[0].name, "cpu_core/mem-loads-aux/");
    assert_eq!(evs[0].event.config, 0x8203);
    assert!(evs[0].group_leader_only && evs[0].leads_next);
    assert_eq!(evs[1].name, "cpu_core/mem-loads,ldlat=50/P");
    assert_eq!((evs[1].event.config, evs[1].event.config1), (0x1cd, 50));
}

#[test]
fn amd_ibs_op() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "cpu/type", "4\n");
    write(d.path(), "ibs_op/type", "11\n");
    let pmu = discover(d.path(), 30).unwrap();
    assert_eq!(
        pmu,
        MemPmu::Amd {
            ibs_op: PmuEvent {
                type_: 11,
                ..PmuEvent::default()
            }
        }
    );
    let evs = events(&pmu, BOTH, 30, KERNEL).unwrap();
    assert_eq!(evs.len(), 1);
    assert_eq!((evs[0].name.as_str(), evs[0].precise_ip), ("ibs_op//", 0));
}

#[test]
fn arm_spe_found_but_not_opened() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "armv8_pmuv3_0/type", "8\n");
    write(d.path(), "arm_spe_0/type", "9\n");
    let pmu = discover(d.path(), 30).unwrap();
    assert!(matches!(&pmu, MemPmu::Arm { pmu, spe } if pmu == "arm_spe_0" && spe.type_ == 9));
    let err = events(&pmu, BOTH, 30, KERNEL).unwrap_err();
    assert!(err.contains("AUX area"), "{err}");
}

#[test]
fn none_without_memory_events() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "software/type", "1\n");
    write(d.path(), "cpu/type", "4\n");
    assert_eq!(discover(d.path(), 30), None);
}

#[test]
fn older_kernels_lose_fields() {
    let st = sample_type((4, 9));
    assert_ne!(st & PERF_SAMPLE_WEIGHT, 0);
    assert_eq!(
        st & (PERF_SAMPLE_WEIGHT_STRUCT | PERF_SAMPLE_PHYS_ADDR | PERF_SAMPLE_DATA_PAGE_SIZE),
        0
    );
    let st = sample_type((5, 11));
    assert_ne!(st & PERF_SAMPLE_DATA_PAGE_SIZE, 0);
    assert_eq!(st & PERF_SAMPLE_WEIGHT_STRUCT, 0);
}

/// The attrs `mem record` opens, as `live::open` builds them for the recorder.
mod attrs {
    use super::*;
    use crate::cmd::mem::record::{record_config, resolved};
    use crate::config::mem::MemRecordConfig;
    use crate::config::record::Target;
    use crate::live::open::{ResolvedEvent, attr_config, check_groups, side_band_event};
    use crate::sys::attr::{build_attr, config1_of};
    use perf_event_open_sys::bindings::perf_event_attr;

    fn attrs(evs: &[MemEvent]) -> (Vec<ResolvedEvent>, Vec<perf_event_attr>) {
        let cfg = MemRecordConfig {
            types: BOTH,
            ldlat: 30,
            output: "mem.data".into(),
            target: Target::Command,
            command: Some(vec!["./app".into()]),
            mmap_pages: None,
            allocations: None,
        };
        let r = resolved(evs).unwrap();
        let rcfg = record_config(&cfg, r.iter().map(|e| e.spec.clone()).collect()).unwrap();
        check_groups(&r).unwrap();
        let tracker = side_band_event(&r);
        let a = r
            .iter()
            .enumerate()
            .map(|(i, e)| build_attr(&attr_config(&rcfg, e, i == tracker, 4096)))
            .collect();
        (r, a)
    }

    /// What every memory event carries on a 6.x kernel: the sample id fields, the data
    /// address and source, WEIGHT_STRUCT, the physical address and the data page size.
    const SAMPLE_TYPE: u64 = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ADDR
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_DATA_SRC
        | PERF_SAMPLE_WEIGHT_STRUCT
        | PERF_SAMPLE_PHYS_ADDR
        | PERF_SAMPLE_DATA_PAGE_SIZE;

    /// The fields every event of a command's recording shares: disabled until the exec,
    /// inherited, no stacks, no callchain.
    fn common(a: &perf_event_attr) {
        assert_eq!(a.sample_type, SAMPLE_TYPE);
        assert_eq!(a.size, crate::sys::attr::ATTR_SIZE);
        assert_eq!(
            (
                a.disabled(),
                a.enable_on_exec(),
                a.inherit(),
                a.sample_id_all()
            ),
            (1, 1, 1, 1)
        );
        assert_eq!((a.sample_regs_user, a.sample_stack_user), (0, 0));
        assert_eq!((a.exclude_user(), a.exclude_kernel()), (0, 0));
    }

    /// A sampling event at perf's default frequency.
    fn samples(a: &perf_event_attr) {
        assert_eq!((a.freq(), a.sample_freq), (1, 4000));
    }

    #[test]
    fn intel_loads_and_stores_are_precise_raw_events_with_ldlat_in_config1() {
        let d = tempfile::tempdir().unwrap();
        intel(d.path(), "cpu", false);
        let pmu = discover(d.path(), 30).unwrap();
        let (r, a) = attrs(&events(&pmu, BOTH, 30, KERNEL).unwrap());
        assert_eq!(a.len(), 2);
        for (i, (config, config1)) in [(0x1cd, 30), (0x82d0, 0)].into_iter().enumerate() {
            common(&a[i]);
            samples(&a[i]);
            assert_eq!((a[i].type_, a[i].config), (4, config));
            assert_eq!(config1_of(&a[i]), config1);
            assert_eq!(a[i].precise_ip(), 3);
            assert_eq!((r[i].leader, r[i].counting), (None, false));
        }
        // The first event asks for the side band, data mappings included.
        assert_eq!((a[0].mmap2(), a[0].mmap_data(), a[0].comm()), (1, 1, 1));
        assert_eq!((a[1].mmap2(), a[1].mmap_data()), (0, 0));
    }

    #[test]
    fn intel_load_latency_is_opened_in_the_group_of_a_counting_mem_loads_aux() {
        let d = tempfile::tempdir().unwrap();
        intel(d.path(), "cpu_core", true);
        let pmu = discover(d.path(), 50).unwrap();
        let (r, a) = attrs(&events(&pmu, BOTH, 50, KERNEL).unwrap());
        assert_eq!(a.len(), 3);
        // The leader: mem-loads-aux, counting (no period, no frequency), never sampled, but
        // with the others' sample layout (one sample id layout for the whole file).
        assert_eq!((r[0].leader, r[0].counting), (None, true));
        common(&a[0]);
        assert_eq!((a[0].type_, a[0].config), (4, 0x8203));
        assert_eq!((a[0].freq(), a[0].sample_period), (0, 0));
        assert_eq!(a[0].precise_ip(), 3);
        // mem-loads joins its group; mem-stores is a group of its own.
        assert_eq!((r[1].leader, r[1].counting), (Some(0), false));
        common(&a[1]);
        samples(&a[1]);
        assert_eq!((a[1].type_, a[1].config), (4, 0x1cd));
        assert_eq!(config1_of(&a[1]), 50);
        assert_eq!(a[1].precise_ip(), 3);
        assert_eq!((r[2].leader, r[2].counting), (None, false));
        common(&a[2]);
        samples(&a[2]);
        assert_eq!((a[2].config, config1_of(&a[2])), (0x82d0, 0));
        // The side band rides on mem-loads, the first event that samples.
        assert_eq!(side_band_event(&r), 1);
        assert_eq!((a[0].mmap2(), a[1].mmap2(), a[1].mmap_data()), (0, 1, 1));
    }

    #[test]
    fn amd_ibs_op_is_one_event_of_its_dynamic_type() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "cpu/type", "4\n");
        write(d.path(), "ibs_op/type", "11\n");
        let pmu = discover(d.path(), 30).unwrap();
        let (r, a) = attrs(&events(&pmu, BOTH, 30, KERNEL).unwrap());
        assert_eq!(a.len(), 1);
        common(&a[0]);
        samples(&a[0]);
        assert_eq!((a[0].type_, a[0].config, config1_of(&a[0])), (11, 0, 0));
        // IBS is precise by nature: perf opens ibs_op// without :p.
        assert_eq!(a[0].precise_ip(), 0);
        assert_eq!((r[0].leader, r[0].counting), (None, false));
        assert_eq!((a[0].mmap2(), a[0].mmap_data()), (1, 1));
    }

    #[test]
    fn older_kernels_open_weight_instead_of_weight_struct() {
        let d = tempfile::tempdir().unwrap();
        intel(d.path(), "cpu", false);
        let pmu = discover(d.path(), 30).unwrap();
        let loads = Types {
            loads: true,
            stores: false,
        };
        let r = resolved(&events(&pmu, loads, 30, (5, 10)).unwrap()).unwrap();
        let st = r[0].sample_extra;
        assert_ne!(st & PERF_SAMPLE_WEIGHT, 0);
        assert_eq!(
            st & (PERF_SAMPLE_WEIGHT_STRUCT | PERF_SAMPLE_DATA_PAGE_SIZE),
            0
        );
        assert_ne!(st & PERF_SAMPLE_PHYS_ADDR, 0);
    }

    #[test]
    fn a_member_before_its_leader_is_refused() {
        let d = tempfile::tempdir().unwrap();
        intel(d.path(), "cpu", true);
        let pmu = discover(d.path(), 30).unwrap();
        let mut r = resolved(&events(&pmu, BOTH, 30, KERNEL).unwrap()).unwrap();
        r.swap(0, 1);
        r[0].leader = Some(1);
        let e = check_groups(&r).unwrap_err().to_string();
        assert!(e.contains("not opened before it"), "{e}");
    }
}
