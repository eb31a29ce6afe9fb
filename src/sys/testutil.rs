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

/// Touches `n` fresh anonymous pages, one write each: `n` page faults of this thread (a
/// mapping of its own, which no allocator may have touched before).
pub fn touch_fresh_pages(n: usize) {
    let page = super::page_size();
    // SAFETY: a private anonymous mapping we write to and unmap before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            n * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        for i in 0..n {
            std::ptr::write_volatile(p.cast::<u8>().add(i * page), 1);
        }
        libc::munmap(p, n * page);
    }
}
