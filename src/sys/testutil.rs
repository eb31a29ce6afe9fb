//! Test helpers for tests that need the kernel's perf events.

/// Whether a live perf test may run. `what` says what the test needs ("a software
/// page-faults event"). When perf events cannot be opened the test should return early; the
/// reason is printed. Under `MEMPERF_REQUIRE_PERF=1` an unusable perf is a failure instead.
pub fn require_perf(what: &str) -> bool {
    match probe() {
        Ok(()) => true,
        Err(reason) => {
            let required = std::env::var_os("MEMPERF_REQUIRE_PERF").is_some_and(|v| v == "1");
            assert!(
                !required,
                "MEMPERF_REQUIRE_PERF=1 but perf events are unusable for {what}: {reason}"
            );
            eprintln!("skipping test that needs {what}: {reason}");
            false
        }
    }
}

/// Opens and closes a software task-clock counter on this thread.
fn probe() -> Result<(), String> {
    use super::attr::{AttrConfig, build_attr};
    use super::open::{Opener, SysOpener};
    use perf_event_open_sys::bindings as b;

    let cfg = AttrConfig {
        type_: b::PERF_TYPE_SOFTWARE,
        config: u64::from(b::PERF_COUNT_SW_TASK_CLOCK),
        exclude_kernel: true,
        exclude_hv: true,
        disabled: true,
        ..AttrConfig::default()
    };
    let attr = build_attr(&cfg);
    SysOpener
        .open(&attr, 0, -1, -1, 0)
        .map(drop)
        .map_err(|errno| {
            format!(
                "perf_event_open failed: {}",
                std::io::Error::from_raw_os_error(errno)
            )
        })
}
