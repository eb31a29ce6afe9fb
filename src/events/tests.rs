//! Event specs as perf takes them: lists, terms, modifiers, tracepoints, globs, filters.
#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;

fn one(s: &str) -> EventSpec {
    match parse_event_list(s) {
        Ok(mut v) if v.len() == 1 => v.remove(0),
        other => panic!("expected one event from {s:?}, got {other:?}"),
    }
}

#[test]
fn software_names_and_aliases() {
    let e = one("faults");
    assert_eq!(e.name, "page-faults");
    assert_eq!(e.kind, EventKind::Software { config: 2 });
    assert_eq!(one("cs").name, "context-switches");
    let builtins = builtin_events();
    let pf = builtins.iter().find(|b| b.name == "page-faults").unwrap();
    assert_eq!(pf.aliases, ["faults"]);
    let cycles = builtins.iter().find(|b| b.name == "cycles").unwrap();
    assert_eq!(cycles.aliases, ["cpu-cycles"]);
    assert!(matches!(cycles.kind, EventKind::Hardware { .. }));
    let names: usize = builtins.iter().map(|b| 1 + b.aliases.len()).sum();
    assert_eq!(names, known_names().len());
    assert_eq!(one("migrations").name, "cpu-migrations");
    assert_eq!(one("major-faults").kind, EventKind::Software { config: 6 });
    assert_eq!(one("dummy").kind, EventKind::Software { config: 9 });
    assert!(!e.is_hardware() && !e.is_tracepoint());
}

#[test]
fn probe_specs_keep_their_paths_and_argument_lists_whole() {
    let specs = parse_event_list(
        "u:/lib/x86_64-linux-gnu/libc.so.6:malloc(size=%di,n=%si),r:libc:free,page-faults,sdt:./app:p:n",
    )
    .unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "u:/lib/x86_64-linux-gnu/libc.so.6:malloc(size=%di,n=%si)",
            "r:libc:free",
            "page-faults",
            "sdt:./app:p:n"
        ]
    );
    match &specs[0].kind {
        EventKind::Probe(p) => {
            assert_eq!(p.target, "/lib/x86_64-linux-gnu/libc.so.6");
            assert_eq!(p.args.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert!(specs[0].takes_filter() && !specs[0].is_tracepoint());
    assert_eq!(specs[1].default_period(), Period::Count(1));
    assert!(matches!(
        parse_event_list("u:libc:malloc(size=%xx)"),
        Err(EventError::Probe(_))
    ));
}

#[test]
fn list_with_tracepoint() {
    let v = parse_event_list("page-faults, syscalls:sys_enter_brk").unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].name, "syscalls:sys_enter_brk");
    assert_eq!(
        v[1].kind,
        EventKind::Tracepoint {
            system: "syscalls".into(),
            name: "sys_enter_brk".into()
        }
    );
    assert!(v[1].is_tracepoint());
    // A tracepoint whose name happens to look like a modifier is still a tracepoint.
    assert!(one("kmem:kp").is_tracepoint());
}

#[test]
fn hardware_with_modifiers() {
    let e = one("cache-misses:pp");
    assert_eq!(e.name, "cache-misses");
    assert_eq!(e.kind, EventKind::Hardware { config: 3 });
    assert_eq!(e.modifiers.precise, 2);
    assert!(!e.modifiers.exclude_user && !e.modifiers.exclude_kernel);
    assert!(e.is_hardware());
    assert_eq!(e.full_name(), "cache-misses:pp");

    let u = one("cycles:u");
    assert!(u.modifiers.exclude_kernel && !u.modifiers.exclude_user);
    assert_eq!(u.to_string(), "cycles:u");
    let k = one("page-faults:k");
    assert!(k.modifiers.exclude_user && !k.modifiers.exclude_kernel);
    let uk = one("instructions:ukppp");
    assert_eq!(
        uk.modifiers,
        Modifiers {
            exclude_user: false,
            exclude_kernel: false,
            precise: 3
        }
    );
    assert!(matches!(
        parse_event_list("cycles:pppp"),
        Err(EventError::BadModifier { .. })
    ));
    assert!(matches!(
        parse_event_list("cycles:x"),
        Err(EventError::BadModifier { .. })
    ));
}

#[test]
fn raw_events() {
    let e = one("r1A8");
    assert_eq!(e.kind, EventKind::Raw { config: 0x1a8 });
    assert_eq!(e.name, "r1a8");
    assert!(e.is_hardware());
    assert!(one("r01c2:u").modifiers.exclude_kernel);
    assert!(matches!(
        parse_event_list("r12345678901234567"),
        Err(EventError::BadRaw { .. })
    ));
}

#[test]
fn tracepoint_errors() {
    assert_eq!(
        parse_event_list("kmem:kmalloc:u"),
        Err(EventError::TracepointModifier {
            event: "kmem:kmalloc:u".into()
        })
    );
    for bad in ["kmem:", ":kmalloc", "kmem:../x", "a:b:c"] {
        assert!(
            matches!(parse_event_list(bad), Err(EventError::BadTracepoint { .. })),
            "{bad}"
        );
    }
}

#[test]
fn empty_lists_and_items() {
    assert_eq!(parse_event_list(""), Err(EventError::EmptyList));
    assert_eq!(parse_event_list("  "), Err(EventError::EmptyList));
    let err = parse_event_list("page-faults,,cs").unwrap_err();
    assert_eq!(
        err.to_string(),
        "empty event name in list `page-faults,,cs`"
    );
}

#[test]
fn unknown_event_message() {
    let err = parse_event_list("page-fault").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown event `page-fault`; did you mean `page-faults`, `major-faults`?"
    );
    let err = parse_event_list("zzzzzzzzzzzzzzzzzzzz").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown event `zzzzzzzzzzzzzzzzzzzz`; run `memperf list` to see the events available here"
    );
}

#[test]
fn suggestions() {
    let tps = [
        "syscalls:sys_enter_brk",
        "syscalls:sys_exit_brk",
        "kmem:kmalloc",
    ]
    .map(String::from);
    assert_eq!(
        suggest("sys_enter_brk", tps.clone()),
        vec!["syscalls:sys_enter_brk", "syscalls:sys_exit_brk"]
    );
    assert_eq!(suggest("kmem:kmaloc", tps.clone()), vec!["kmem:kmalloc"]);
    assert!(suggest("completely-different", tps).is_empty());
    let many = (0..10).map(|i| format!("ev{i}"));
    assert_eq!(suggest("ev", many).len(), 5);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
}

#[test]
fn terms_globs_and_filter_fields() {
    let v = parse_event_list(
        "page-faults/period=10/u,kmem:kmalloc/call-graph=dwarf,4096,max-stack=8,name=km/,kmem:mm_page_*",
    )
    .unwrap();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0].terms.period, Some(Period::Count(10)));
    assert!(v[0].modifiers.exclude_kernel);
    assert_eq!(
        v[1].terms.call_graph,
        Some(CallGraph::Dwarf { stack_bytes: 4096 })
    );
    assert_eq!(v[1].terms.max_stack, Some(8));
    assert_eq!(v[1].terms.label.as_deref(), Some("km"));
    assert_eq!(v[2].glob(), Some(("kmem", "mm_page_*")));
    assert_eq!(
        one("cycles/freq=99/").terms.period,
        Some(Period::Frequency(99))
    );
    assert_eq!(
        one("faults/call-graph=fp/").terms.call_graph,
        Some(CallGraph::Fp)
    );
    assert!(matches!(
        parse_event_list("page-faults/perio=1/"),
        Err(EventError::BadTerm { .. })
    ));
    assert!(matches!(
        parse_event_list("page-faults/period=0/"),
        Err(EventError::BadTerm { .. })
    ));
    assert!(matches!(
        parse_event_list("page-faults/period=1"),
        Err(EventError::UnterminatedTerms { .. })
    ));
    assert!(matches!(
        parse_event_list("kmem:kmalloc/period=2/u"),
        Err(EventError::TracepointModifier { .. })
    ));
    assert!(glob_match("mm_page_*", "mm_page_alloc"));
    assert!(glob_match("*mmap*", "sys_enter_mmap"));
    assert!(glob_match("sys_[ex]*_brk", "sys_exit_brk"));
    assert!(glob_match("sys_[!x]*", "sys_enter_brk"));
    assert!(!glob_match("sys_[!e]*", "sys_enter_brk"));
    assert!(glob_match("kmallo?", "kmalloc"));
    assert!(!glob_match("mm_page_*", "kmalloc"));
    assert_eq!(
        filter_fields("len >= 1048576 && (flags & 0x20) || comm == \"a>b\""),
        ["len", "flags", "comm"]
    );
    assert_eq!(filter_fields("!(bytes_alloc<4096)"), ["bytes_alloc"]);
    assert_eq!(filter_fields("name ~ \"dentry*\""), ["name"]);
}

#[test]
fn default_periods() {
    assert_eq!(one("page-faults").default_period(), Period::Count(1));
    assert_eq!(one("minor-faults").default_period(), Period::Count(1));
    assert_eq!(one("cs").default_period(), Period::Count(1));
    assert_eq!(one("kmem:kmalloc").default_period(), Period::Count(1));
    assert_eq!(one("cpu-clock").default_period(), Period::Frequency(4000));
    assert_eq!(one("task-clock").default_period(), Period::Frequency(4000));
    assert_eq!(one("cycles").default_period(), Period::Frequency(4000));
    assert_eq!(one("r1a8").default_period(), Period::Frequency(4000));
}

#[test]
fn known_names_cover_tables() {
    let names = known_names();
    assert!(names.contains(&"page-faults") && names.contains(&"ref-cycles"));
    assert!(names.contains(&"cs"));
    assert_eq!(names.len(), SOFTWARE.len() + HARDWARE.len());
}
