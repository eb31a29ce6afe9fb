//! Tests for `diagnose`, one per errno case, with fabricated system facts.

#![allow(clippy::unwrap_used)]

use super::*;

fn user(paranoid: i32) -> SystemFacts {
    SystemFacts {
        paranoid: Some(paranoid),
        euid: 1000,
        mlock_kb: Some(516),
        ..SystemFacts::default()
    }
}

fn ctx(event: &str, class: EventClass) -> OpenContext<'_> {
    OpenContext {
        event,
        class,
        pid: None,
        cpu: None,
        system_wide: false,
    }
}

#[test]
fn paranoid_two_suggests_user_only() {
    let msg = explain_open_error(
        libc::EACCES,
        &ctx("page-faults", EventClass::Software),
        &user(2),
    );
    assert!(
        msg.starts_with("permission denied opening `page-faults`: "),
        "{msg}"
    );
    assert!(msg.contains("kernel.perf_event_paranoid is 2, which allows only user-space profiling of your own processes"), "{msg}");
    assert!(
        msg.contains("`--user-only`") && msg.contains("`:u`"),
        "{msg}"
    );
    assert!(msg.contains("kernel.perf_event_paranoid=1"), "{msg}");
    assert!(msg.contains("CAP_PERFMON (Linux 5.8+)"), "{msg}");
}

#[test]
fn system_wide_needs_paranoid_zero() {
    let mut c = ctx("page-faults", EventClass::Software);
    c.system_wide = true;
    let msg = explain_open_error(libc::EACCES, &c, &user(1));
    assert!(msg.contains("opening `page-faults` system-wide"), "{msg}");
    assert!(msg.contains("paranoid is 1, which allows user and kernel profiling of your own processes, but not system-wide"), "{msg}");
    assert!(msg.contains("kernel.perf_event_paranoid=0"), "{msg}");
}

#[test]
fn tracepoints_need_privileges() {
    let msg = explain_open_error(
        libc::EACCES,
        &ctx("kmem:kmalloc", EventClass::Tracepoint),
        &user(2),
    );
    assert!(msg.contains("tracepoints need privileges"), "{msg}");
    assert!(msg.contains("kernel.perf_event_paranoid=-1"), "{msg}");
    assert!(msg.contains("CAP_PERFMON"), "{msg}");
}

#[test]
fn debian_paranoid_three_and_minus_one() {
    let msg = explain_open_error(
        libc::EPERM,
        &ctx("page-faults", EventClass::Software),
        &user(3),
    );
    assert!(
        msg.contains("paranoid is 3, which allows nothing without CAP_PERFMON"),
        "{msg}"
    );
    assert!(msg.contains("kernel.perf_event_paranoid=2"), "{msg}");
    let msg = explain_open_error(
        libc::EPERM,
        &ctx("page-faults", EventClass::Software),
        &user(-1),
    );
    assert!(
        msg.contains("paranoid is -1, which allows everything"),
        "{msg}"
    );
    let msg = explain_open_error(
        libc::EPERM,
        &ctx("page-faults", EventClass::Software),
        &user(0),
    );
    assert!(
        msg.contains("paranoid is 0, which allows user and kernel profiling, system-wide too"),
        "{msg}"
    );
}

#[test]
fn other_users_process() {
    let mut c = ctx("page-faults", EventClass::Software);
    c.pid = Some(4321);
    let msg = explain_open_error(libc::EACCES, &c, &user(2));
    assert!(msg.contains("on process 4321"), "{msg}");
    assert!(msg.contains("a process you do not own"), "{msg}");
}

#[test]
fn privileged_denial_blames_security_modules() {
    let root = SystemFacts {
        euid: 0,
        paranoid: Some(2),
        ..SystemFacts::default()
    };
    let msg = explain_open_error(
        libc::EACCES,
        &ctx("page-faults", EventClass::Software),
        &root,
    );
    assert!(msg.contains("security module"), "{msg}");
    assert!(!msg.contains("sysctl"), "{msg}");
}

#[test]
fn no_hardware_pmu() {
    let facts = user(2);
    for errno in [libc::ENOENT, libc::EOPNOTSUPP] {
        let msg = explain_open_error(errno, &ctx("cache-misses", EventClass::Hardware), &facts);
        assert_eq!(
            msg,
            "cannot open hardware event `cache-misses`: this machine has no hardware PMU \
             (virtual machines usually don't expose one); use a software event such as \
             page-faults or cpu-clock"
        );
    }
    let with_pmu = SystemFacts {
        pmu_cpu_present: true,
        ..user(2)
    };
    let msg = explain_open_error(
        libc::ENOENT,
        &ctx("ref-cycles", EventClass::Hardware),
        &with_pmu,
    );
    assert!(msg.contains("this CPU's PMU does not provide it"), "{msg}");
    let msg = explain_open_error(
        libc::EOPNOTSUPP,
        &ctx("cycles:ppp", EventClass::Hardware),
        &with_pmu,
    );
    assert!(msg.contains("precise `:p`"), "{msg}");
}

#[test]
fn missing_tracepoint_and_uprobe() {
    let msg = explain_open_error(
        libc::ENOENT,
        &ctx("kmem:rss_stat", EventClass::Tracepoint),
        &user(2),
    );
    assert!(
        msg.contains("`kmem:rss_stat`: tracepoint not available on this kernel"),
        "{msg}"
    );
    let msg = explain_open_error(
        libc::ENOENT,
        &ctx("u:/lib/libc.so.6:malloc", EventClass::Uprobe),
        &user(2),
    );
    assert!(msg.contains("binary or symbol was not found"), "{msg}");
}

#[test]
fn process_and_file_limits() {
    let mut c = ctx("page-faults", EventClass::Software);
    c.pid = Some(99999);
    assert_eq!(
        explain_open_error(libc::ESRCH, &c, &user(2)),
        "cannot open `page-faults`: no such process 99999"
    );
    let msg = explain_open_error(libc::EMFILE, &c, &user(2));
    assert!(
        msg.contains("too many open files") && msg.contains("`ulimit -n`"),
        "{msg}"
    );
    let msg = explain_open_error(libc::ENFILE, &c, &user(2));
    assert!(msg.contains("fs.file-max"), "{msg}");
}

#[test]
fn einval_ebusy_e2big_enodev() {
    let mut c = ctx("page-faults", EventClass::Software);
    c.cpu = Some(7);
    let msg = explain_open_error(libc::EINVAL, &c, &user(2));
    assert!(
        msg.contains("rejected the settings for `page-faults`") && msg.contains("too old"),
        "{msg}"
    );
    assert!(msg.contains("cpu 7"), "{msg}");
    assert!(explain_open_error(libc::EBUSY, &c, &user(2)).contains("exclusive use"));
    assert!(explain_open_error(libc::E2BIG, &c, &user(2)).contains("E2BIG"));
    let msg = explain_open_error(libc::ENODEV, &c, &user(2));
    assert!(msg.contains("not supported on this CPU 7"), "{msg}");
    assert!(explain_open_error(libc::EOVERFLOW, &c, &user(2)).contains("perf_event_max_stack"));
    let msg = explain_open_error(libc::EIO, &c, &user(2));
    assert!(
        msg.starts_with("cannot open `page-faults`: Input/output error"),
        "{msg}"
    );
}

#[test]
fn mmap_limits() {
    let pages = 256;
    let kib = (pages + 1) * crate::sys::page_size() / 1024;
    let msg = explain_mmap_error(libc::EPERM, pages, &user(2));
    assert!(
        msg.starts_with(&format!(
            "ring buffer of {kib} KiB exceeds the locked-memory limit (perf_event_mlock_kb=516"
        )),
        "{msg}"
    );
    assert!(
        msg.contains("smaller `-m`") && msg.contains("run as root"),
        "{msg}"
    );
    let root = SystemFacts { euid: 0, ..user(2) };
    let msg = explain_mmap_error(libc::ENOMEM, pages, &root);
    assert!(msg.contains("out of memory"), "{msg}");
    assert!(explain_mmap_error(libc::EINVAL, 3, &root).contains("power of two"));
}

#[test]
fn facts_parsing() {
    let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001fffeffffff\n";
    let caps = parse_cap_eff(status).unwrap();
    assert_ne!(caps & (1 << CAP_PERFMON), 0);
    assert_ne!(caps & (1 << CAP_SYS_ADMIN), 0);
    assert_eq!(
        parse_cap_eff("CapEff:\t0000000000004000\n"),
        Some(1 << CAP_IPC_LOCK)
    );
    assert_eq!(parse_cap_eff("Name: x\n"), None);

    let dir = tempfile::tempdir().unwrap();
    for name in ["software", "tracepoint"] {
        std::fs::create_dir(dir.path().join(name)).unwrap();
    }
    assert!(!cpu_pmu_present(dir.path()));
    std::fs::create_dir(dir.path().join("cpu_core")).unwrap();
    assert!(cpu_pmu_present(dir.path()));
}

#[test]
fn facts_of_this_machine() {
    let facts = SystemFacts::read();
    // SAFETY: geteuid has no preconditions.
    assert_eq!(facts.euid, unsafe { libc::geteuid() });
    assert!(facts.paranoid.is_some());
    if facts.euid == 0 {
        assert!(facts.cap_sys_admin);
    }
}

#[test]
fn kptr_restrict_notes() {
    let facts = |level, euid| SystemFacts {
        kptr_restrict: Some(level),
        euid,
        ..SystemFacts::default()
    };
    assert_eq!(kptr_restrict_note(&facts(0, 1000)), None);
    assert_eq!(kptr_restrict_note(&facts(1, 0)), None);
    let msg = kptr_restrict_note(&facts(1, 1000)).unwrap();
    assert!(
        msg.contains("kernel.kptr_restrict=1") && msg.contains("[unknown]"),
        "{msg}"
    );
    assert!(kptr_restrict_note(&facts(2, 0)).is_some());
    assert_eq!(kptr_restrict_note(&SystemFacts::default()), None);
}

#[test]
fn live_hardware_event_is_diagnosed() {
    use crate::sys::attr::{AttrConfig, build_attr};
    use crate::sys::open::{FeatureState, SysOpener, open_event};
    use perf_event_open_sys::bindings as b;

    if !crate::sys::testutil::require_perf("perf events, to try a hardware one") {
        return;
    }
    let facts = SystemFacts::read();
    let cfg = AttrConfig {
        type_: b::PERF_TYPE_HARDWARE,
        config: u64::from(b::PERF_COUNT_HW_CACHE_MISSES),
        disabled: true,
        ..AttrConfig::default()
    };
    let mut attr = build_attr(&cfg);
    let mut features = FeatureState::default();
    match open_event(&SysOpener, &mut attr, 0, -1, &mut features) {
        Ok(_) => {
            assert!(
                facts.pmu_cpu_present,
                "a hardware event opened without a cpu PMU in sysfs"
            );
            eprintln!("this machine has a hardware PMU; the no-PMU diagnosis is not exercised");
        }
        Err(errno) => {
            let msg = explain_open_error(errno, &ctx("cache-misses", EventClass::Hardware), &facts);
            if !facts.pmu_cpu_present {
                assert!(
                    msg.contains("this machine has no hardware PMU"),
                    "errno {errno}: {msg}"
                );
            }
            assert!(msg.contains("`cache-misses`"), "{msg}");
        }
    }
}

#[test]
fn a_process_of_another_user_is_refused_for_ptrace_not_for_paranoid() {
    let me = SystemFacts {
        uid: 1000,
        gid: 1000,
        ..user(2)
    };
    let status = "Name:\tsleep\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
    let (uids, gids) = parse_ids(status).unwrap();
    assert_eq!((uids, gids), ([0, 0, 0], [0, 0, 0]));
    assert_eq!(
        ptrace_refusal_for(uids, gids, &me).as_deref(),
        Some("it runs as uid 0, you as uid 1000")
    );
    // A set-group-id program of one's own: its saved gid differs.
    assert!(
        ptrace_refusal_for([1000; 3], [1000, 1000, 5], &me)
            .is_some_and(|w| w.contains("gid 5 (set-group-id)"))
    );
    assert_eq!(ptrace_refusal_for([1000; 3], [1000; 3], &me), None);
}

#[test]
fn uprobes_need_privileges_whatever_paranoid_says() {
    let ctx = OpenContext {
        event: "uprobe:malloc",
        class: EventClass::Uprobe,
        pid: Some(4242),
        cpu: Some(0),
        system_wide: false,
    };
    for paranoid in [-1, 0, 1, 2] {
        let msg = explain_open_error(libc::EACCES, &ctx, &user(paranoid));
        assert!(msg.contains("uprobes"), "{msg}");
        assert!(
            msg.contains("no kernel.perf_event_paranoid value allows them"),
            "{msg}"
        );
    }
}

#[test]
fn short_reasons_for_the_list_column() {
    let vm_root = SystemFacts {
        euid: 0,
        pmu_cpu_present: false,
        ..SystemFacts::default()
    };
    assert_eq!(
        short_reason(libc::ENOENT, EventClass::Hardware, &vm_root, true),
        "no PMU in this VM"
    );
    assert_eq!(
        short_reason(libc::EOPNOTSUPP, EventClass::Hardware, &vm_root, false),
        "no PMU on this machine"
    );
    assert_eq!(
        short_reason(libc::ENOENT, EventClass::Tracepoint, &vm_root, true),
        "not on this kernel"
    );
    let u = user(2);
    assert!(short_reason(libc::EACCES, EventClass::Tracepoint, &u, true).starts_with("needs root"));
    assert_eq!(
        short_reason(libc::EACCES, EventClass::Software, &u, true),
        "needs root or CAP_PERFMON (kernel.perf_event_paranoid is 2)"
    );
    assert!(short_reason(libc::EPERM, EventClass::Software, &vm_root, true).contains("security"));
    assert!(cpuinfo_says_hypervisor(
        "processor : 0\nflags : fpu vme hypervisor lahf_lm\n"
    ));
    assert!(!cpuinfo_says_hypervisor(
        "flags : fpu vme\nhypervisor vendor: none\n"
    ));
}
