//! Demangling Rust (legacy and v0) and C++ symbol names.

/// The demangled form of `name`, or `None` if it is not a mangled Rust or C++ name.
/// Rust legacy hashes (`::h0123…`) are dropped.
pub(crate) fn demangle(name: &str) -> Option<String> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return Some(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        let sym = cpp_demangle::Symbol::new(name.as_bytes()).ok()?;
        return sym.demangle().ok();
    }
    None
}

/// `name`, demangled when asked and possible.
pub(crate) fn maybe_demangle(name: &str, demangle_names: bool) -> String {
    if demangle_names && let Some(d) = demangle(name) {
        return d;
    }
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_legacy_drops_the_hash() {
        let d = demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE");
        assert_eq!(d.as_deref(), Some("core::ptr::drop_in_place"));
    }

    #[test]
    fn rust_v0() {
        let d = demangle("_RNvCs1234_7mycrate3foo");
        assert_eq!(d.as_deref(), Some("mycrate::foo"));
    }

    #[test]
    fn cpp() {
        let d = demangle("_ZN3foo3barEi");
        assert_eq!(d.as_deref(), Some("foo::bar(int)"));
    }

    #[test]
    fn plain_c_names_are_kept() {
        assert_eq!(demangle("malloc"), None);
        assert_eq!(maybe_demangle("malloc", true), "malloc");
        assert_eq!(maybe_demangle("_ZN3foo3barEi", false), "_ZN3foo3barEi");
    }
}
