//! A tracepoint named without its system (`-e brk`, `-e mm_page_alloc`): what such a name
//! means among the kernel's tracepoints. The caller lists them (tracefs); this only
//! decides, so it is tested on plain lists.

/// What a short name matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShortMatch {
    /// One tracepoint, taken.
    One { system: String, name: String },
    /// Several, equally good: each as `system:name`, sorted.
    Many(Vec<String>),
    /// None.
    Nothing,
}

/// One way a short name may match a tracepoint, given as (system, name).
type Rule<'a> = dyn Fn(&(String, String)) -> bool + 'a;

/// The tracepoints (each `system:name`) that `short` names, by the first of these rules
/// that matches any:
/// 1. the tracepoint of that very name (`mm_page_alloc` is `kmem:mm_page_alloc`);
/// 2. the entry of the system call of that name (`brk` is `syscalls:sys_enter_brk`): a
///    system call is traced at its entry, as strace and `perf trace` name it;
/// 3. the tracepoints of the system of that name (`oom`: every `oom:*`, listed);
/// 4. the tracepoints whose name holds it as whole `_`-separated words (`page_fault` in
///    `exceptions:page_fault_user`).
///
/// One match is taken; several are listed for the user to choose.
pub fn find(short: &str, tracepoints: &[String]) -> ShortMatch {
    if short.is_empty() || short.contains(':') {
        return ShortMatch::Nothing;
    }
    let split = |tp: &'_ String| -> Option<(String, String)> {
        tp.split_once(':')
            .map(|(s, n)| (s.to_string(), n.to_string()))
    };
    let all: Vec<(String, String)> = tracepoints.iter().filter_map(split).collect();
    let syscall = format!("sys_enter_{short}");
    let rules: [&Rule; 4] = [
        &|(_, n)| n == short,
        &|(s, n)| s == "syscalls" && *n == syscall,
        &|(s, _)| s == short,
        &|(_, n)| holds_words(n, short),
    ];
    for rule in rules {
        let mut hits: Vec<&(String, String)> = all.iter().filter(|tp| rule(tp)).collect();
        match hits.len() {
            0 => continue,
            1 => {
                let (system, name) = hits.remove(0).clone();
                return ShortMatch::One { system, name };
            }
            _ => {
                let mut names: Vec<String> = hits.iter().map(|(s, n)| format!("{s}:{n}")).collect();
                names.sort_unstable();
                return ShortMatch::Many(names);
            }
        }
    }
    ShortMatch::Nothing
}

/// Whether `name`'s `_`-separated words hold `words`'s, in a row (`page_fault_user` holds
/// `page_fault`, `fault_user` and `user`; not `age_fault`).
fn holds_words(name: &str, words: &str) -> bool {
    let (name, words) = (format!("_{name}_"), format!("_{words}_"));
    name.contains(&words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracepoints() -> Vec<String> {
        [
            "syscalls:sys_enter_brk",
            "syscalls:sys_exit_brk",
            "syscalls:sys_enter_mmap",
            "syscalls:sys_exit_mmap",
            "kmem:mm_page_alloc",
            "kmem:kmalloc",
            "exceptions:page_fault_user",
            "exceptions:page_fault_kernel",
            "oom:mark_victim",
            "oom:oom_score_adj_update",
            "a:dup",
            "b:dup",
        ]
        .map(String::from)
        .to_vec()
    }

    fn one(system: &str, name: &str) -> ShortMatch {
        ShortMatch::One {
            system: system.to_string(),
            name: name.to_string(),
        }
    }

    #[test]
    fn a_syscall_name_is_its_entry_and_a_tracepoint_name_is_itself() {
        let t = tracepoints();
        assert_eq!(find("brk", &t), one("syscalls", "sys_enter_brk"));
        assert_eq!(find("mmap", &t), one("syscalls", "sys_enter_mmap"));
        assert_eq!(find("mm_page_alloc", &t), one("kmem", "mm_page_alloc"));
        assert_eq!(find("kmalloc", &t), one("kmem", "kmalloc"));
        assert_eq!(find("mark_victim", &t), one("oom", "mark_victim"));
        assert_eq!(find("victim", &t), one("oom", "mark_victim"));
        assert_eq!(find("sys_exit_brk", &t), one("syscalls", "sys_exit_brk"));
    }

    #[test]
    fn ambiguous_names_list_every_candidate() {
        let t = tracepoints();
        assert_eq!(
            find("page_fault", &t),
            ShortMatch::Many(vec![
                "exceptions:page_fault_kernel".to_string(),
                "exceptions:page_fault_user".to_string()
            ])
        );
        assert_eq!(
            find("oom", &t),
            ShortMatch::Many(vec![
                "oom:mark_victim".to_string(),
                "oom:oom_score_adj_update".to_string()
            ])
        );
        assert_eq!(
            find("dup", &t),
            ShortMatch::Many(vec!["a:dup".to_string(), "b:dup".to_string()])
        );
    }

    #[test]
    fn no_match_is_nothing() {
        let t = tracepoints();
        assert_eq!(find("age_fault", &t), ShortMatch::Nothing);
        assert_eq!(find("page-fault", &t), ShortMatch::Nothing);
        assert_eq!(find("", &t), ShortMatch::Nothing);
        assert_eq!(find("brk", &[]), ShortMatch::Nothing);
    }
}
