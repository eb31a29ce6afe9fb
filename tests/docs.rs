//! The README and the pages under `docs/` stay true: what `scripts/test.sh` installs is what
//! the README says it installs, every link between the pages leads somewhere, and every
//! command the README's question table names is one memperf has.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Debian packages `scripts/test.sh` installs: every word of its `need+=(...)` lists.
fn packages_test_sh_installs() -> BTreeSet<String> {
    let script = read(&root().join("scripts/test.sh"));
    let mut packages = BTreeSet::new();
    for line in script.lines() {
        let Some(at) = line.find("need+=(") else {
            continue;
        };
        let list = &line[at + "need+=(".len()..];
        let list = &list[..list.find(')').expect("need+=( closed on its line")];
        packages.extend(list.split_whitespace().map(str::to_string));
    }
    packages
}

fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let rest = &text[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

#[test]
fn the_readme_names_every_package_the_test_command_installs() {
    let packages = packages_test_sh_installs();
    assert!(
        packages.len() >= 8,
        "test.sh's packages not found: {packages:?}"
    );
    let readme = read(&root().join("README.md"));
    let tests = section(&readme, "## Tests");
    for package in &packages {
        assert!(
            tests.contains(&format!("`{package}`")),
            "scripts/test.sh installs {package}; README's Tests section does not say so"
        );
    }
    assert!(
        tests.contains("inferno"),
        "README does not say test.sh installs inferno"
    );
}

/// The markdown pages: README.md and every file under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages
}

/// The targets of the page's relative links `[text](target)`.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !target.contains("://") && !target.starts_with('#') && !target.contains(' ') {
            links.push(target.to_string());
        }
    }
    links
}

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_link_between_the_pages_leads_somewhere() {
    for page in pages() {
        let text = read(&page);
        for link in relative_links(&text) {
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = page.parent().unwrap().join(file);
            assert!(
                target.exists(),
                "{} links to {link}, which does not exist",
                page.display()
            );
            if fragment.is_empty() || target.is_dir() {
                continue;
            }
            let anchors: Vec<String> = read(&target)
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .collect();
            assert!(
                anchors.iter().any(|a| a == fragment),
                "{} links to {link}: no such heading in {file} (has {anchors:?})",
                page.display()
            );
        }
    }
}

/// The subcommands the README's first screen (up to its first `##` heading) names.
fn first_screen_subcommands() -> BTreeSet<String> {
    let readme = read(&root().join("README.md"));
    let first = &readme[..readme.find("\n## ").expect("a second heading")];
    let mut commands = BTreeSet::new();
    for part in first.split("memperf ").skip(1) {
        let word: String = part
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        if !word.is_empty() {
            commands.insert(word);
        }
    }
    commands
}

#[test]
fn the_first_screen_answers_with_commands_memperf_has() {
    let readme = read(&root().join("README.md"));
    let first = &readme[..readme.find("\n## ").expect("a second heading")];
    assert!(
        first.lines().count() <= 40,
        "the README's first screen is {} lines",
        first.lines().count()
    );
    let commands = first_screen_subcommands();
    for expected in ["triage", "record", "report", "leak", "rss", "stat", "diff"] {
        assert!(
            commands.contains(expected),
            "the first screen lacks {expected}"
        );
    }
    for command in &commands {
        let out = common::run_memperf(&[command, "--help"]);
        assert!(
            out.status.success(),
            "memperf {command} --help: {}",
            common::stderr(&out)
        );
    }
}

#[test]
fn every_bench_script_is_listed_in_the_development_page() {
    let page = read(&root().join("docs/development.md"));
    for entry in std::fs::read_dir(root().join("benches")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".sh") {
            assert!(
                page.contains(&format!("benches/{name}")),
                "benches/{name} is not in docs/development.md's list"
            );
        }
    }
}
