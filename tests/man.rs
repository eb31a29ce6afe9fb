#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The man pages in man/ are generated from the CLI definitions; this fails when
//! they are stale. Re-bless with `MEMPERF_BLESS=1 cargo test --test man`.

use std::path::Path;

#[test]
fn man_pages_are_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let bless = std::env::var("MEMPERF_BLESS").as_deref() == Ok("1");
    for (name, text) in memperf::man::render_all().expect("render man pages") {
        let path = dir.join(&name);
        if bless {
            std::fs::write(&path, &text).expect("write man page");
            continue;
        }
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == text,
            "man/{name} is stale: run `MEMPERF_BLESS=1 cargo test --test man` and commit it"
        );
    }
}

/// A page's synopsis says what one types (`memperf leak ...`), not the page's name
/// (`memperf-leak`, which is no command).
#[test]
fn synopses_name_the_command_as_typed() {
    for (name, text) in memperf::man::render_all().expect("render man pages") {
        let Some(sub) = name
            .strip_prefix("memperf-")
            .and_then(|n| n.strip_suffix(".1"))
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        let synopsis = text
            .split_once(".SH SYNOPSIS\n")
            .and_then(|(_, rest)| rest.lines().next())
            .unwrap_or_else(|| panic!("{name} has no synopsis:\n{text}"));
        let want = format!("\\fBmemperf {}\\fR", sub.replace('-', "\\-"));
        assert!(
            synopsis.starts_with(&want),
            "{name}: the synopsis starts `{}`, not `{want}`",
            &synopsis[..synopsis.len().min(40)]
        );
    }
}
