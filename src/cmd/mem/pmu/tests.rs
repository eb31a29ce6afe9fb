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
