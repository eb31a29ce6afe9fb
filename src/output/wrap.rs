//! Prose lines wrapped to a terminal's width, broken between words: the headers of text
//! outputs (`# ` then the words, the lines after the first indented `#   ` so that a reader
//! sees where one line goes on), and the summaries and notes the commands print on standard
//! error (a line's own indentation, its continuation lines 4 columns further in). Table rows
//! and stacks are not prose: they are printed as they are.

use std::io::{self, Write};

/// The width prose lines are wrapped to.
pub const COLUMNS: usize = 80;

/// `text` as `# `-prefixed lines of at most `width` characters, broken between words. A word
/// longer than a line (a long path) is broken across lines.
pub fn comment(text: &str, width: usize) -> Vec<String> {
    fill(text, "# ", "#   ", width)
}

/// `text`, a line of prose, as lines of at most `width` characters: as it is when it fits
/// (its spacing kept), else broken between words, each continuation indented 4 columns past
/// the line's own indentation.
pub fn line(text: &str, width: usize) -> Vec<String> {
    if text.chars().count() <= width {
        return vec![text.to_string()];
    }
    let body = text.trim_start();
    let indent = &text[..text.len() - body.len()];
    fill(body, indent, &format!("{indent}    "), width)
}

/// `text`, a row whose first `at` columns are a label (kept as they are, spacing and all)
/// and the rest prose, as lines of at most `width` characters: the prose broken between
/// words, its continuation lines indented to column `at`.
pub fn hanging(text: &str, at: usize, width: usize) -> Vec<String> {
    let cut = text.char_indices().nth(at).map_or(text.len(), |(i, _)| i);
    if text.chars().count() <= width || cut == text.len() {
        return vec![text.to_string()];
    }
    let (label, prose) = text.split_at(cut);
    fill(prose.trim_start(), label, &" ".repeat(at), width)
}

/// Writes `text` as [`hanging`] lines of [`COLUMNS`].
pub fn write_hanging(out: &mut dyn Write, text: &str, at: usize) -> io::Result<()> {
    for l in hanging(text, at, COLUMNS) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// Writes `text` as [`line`]s of [`COLUMNS`].
pub fn write_line(out: &mut dyn Write, text: &str) -> io::Result<()> {
    for l in line(text, COLUMNS) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// Writes `text` as [`comment`] lines of [`COLUMNS`].
pub fn write_comment(out: &mut dyn Write, text: &str) -> io::Result<()> {
    for l in comment(text, COLUMNS) {
        writeln!(out, "{l}")?;
    }
    Ok(())
}

/// Prints `text` on standard error as [`line`]s of [`COLUMNS`].
pub fn eprint(text: &str) {
    for l in line(text, COLUMNS) {
        eprintln!("{l}");
    }
}

/// The words of `text` after `first`, a line broken before a word that would pass `width`
/// and the next begun with `rest`; a word longer than a line is cut in pieces.
fn fill(text: &str, first: &str, rest: &str, width: usize) -> Vec<String> {
    let room = width.saturating_sub(rest.chars().count()).max(8);
    let words = text.split(' ').filter(|w| !w.is_empty()).flat_map(|w| {
        let chars: Vec<char> = w.chars().collect();
        chars
            .chunks(room)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
    });
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut len = first.chars().count();
    let mut empty = true;
    for word in words {
        let n = word.chars().count();
        if !empty && len + 1 + n > width {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            len = rest.chars().count();
            empty = true;
        }
        if !empty {
            line.push(' ');
            len += 1;
        }
        line.push_str(&word);
        len += n;
        empty = false;
    }
    if empty {
        line.truncate(line.trim_end().len());
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_between_words() {
        assert_eq!(comment("event x: 3 samples", 80), ["# event x: 3 samples"]);
        let long = "lost 0 events in 0 LOST records, 0 lost samples, throttled 0 times; 3 of 300 user stacks truncated (3 stack end)";
        let lines = comment(long, 40);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert!(
            lines[1..].iter().all(|l| l.starts_with("#   ")),
            "{lines:?}"
        );
        let words: Vec<&str> = lines
            .iter()
            .flat_map(|l| l.trim_start_matches('#').split_whitespace())
            .collect();
        assert_eq!(words.join(" "), long);
        // A word longer than the width: broken across lines.
        let lines = comment("file /a/very/long/path/beyond next", 12);
        assert_eq!(
            lines,
            [
                "# file",
                "#   /a/very/",
                "#   long/pat",
                "#   h/beyond",
                "#   next"
            ]
        );
        assert_eq!(comment("", 80), ["#"]);
    }

    #[test]
    fn a_prose_line_keeps_its_indentation_and_its_continuations_go_further_in() {
        // One that fits is left as it is, its spacing too (a table's columns).
        assert_eq!(
            line("  page-faults     12 samples", 80),
            ["  page-faults     12 samples"]
        );
        let long =
            "  note: dwarf,auto: `page-faults` copied 8192 bytes, then 1792 from stack 2782 on";
        let lines = line(long, 40);
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        assert!(lines[0].starts_with("  note:"), "{lines:?}");
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.starts_with("      ") && !l.starts_with("       ")),
            "{lines:?}"
        );
        let words: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words.join(" "), long.trim());
    }

    #[test]
    fn a_labelled_row_keeps_its_label_and_hangs_its_prose_under_it() {
        let row = "saturation   PSI        some avg10 0.03, full avg10 0.00; stalled 4 ms (some)";
        let lines = hanging(row, 24, 50);
        assert_eq!(lines[0], "saturation   PSI        some avg10 0.03, full");
        assert!(
            lines[1..].iter().all(|l| l.starts_with(&" ".repeat(24))),
            "{lines:?}"
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 50), "{lines:?}");
        assert_eq!(hanging("short  row", 7, 50), ["short  row"]);
    }
}
