//! A symbolizer kept from one agent window to the next (`Symbolizer::next_window`).

use std::path::Path;

use super::Symbolizer;
use super::tests::{LIBC, func_offset, key, opts, outer_name};
use crate::stacks::CodeAddr;

/// A file found missing in one window (its process exited between the look through
/// `/proc/PID/root` and the open, or it was not there yet) is looked for again in the next:
/// the kept symbolizer named every frame of that file `[unknown]` for the rest of the run
/// (tests/agent_otlp.rs lost the whole of one fixture round's stacks this way).
#[test]
fn a_file_missing_in_one_window_is_looked_up_again_in_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libc.so.6");
    let off = func_offset(Path::new(LIBC), "free", 0).unwrap();
    let at = CodeAddr::new(off, false);
    let mut s = Symbolizer::new(opts(false, false, true));
    assert_eq!(outer_name(&s.symbolize(&key(&lib), at)), None);
    std::fs::copy(LIBC, &lib).unwrap();
    s.next_window();
    let r = s.symbolize(&key(&lib), at);
    assert!(
        matches!(outer_name(&r), Some("free" | "__libc_free")),
        "{r:?}"
    );
    // A file it loaded stays loaded: the next window finds it by a stat.
    s.next_window();
    let loaded = s.stats().modules_loaded;
    let again = s.symbolize(&key(&lib), at);
    assert_eq!(outer_name(&again), outer_name(&r));
    assert_eq!(s.stats().modules_loaded, loaded);
}
