//! Test helpers for tests that need the kernel's perf events.

/// Whether a live perf test may run. `what` says what the test needs ("a software
/// page-faults event"). When perf events cannot be opened the test should return early; the
/// reason is printed. Under `MEMPERF_REQUIRE_PERF=1` an unusable perf is a failure instead.
pub fn require_perf(what: &str) -> bool {
    match super::probe_perf_events() {
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
