//! Header lines of text outputs wrapped to a terminal's width: `# ` then the words, the
//! lines after the first indented (`#   `) so that a reader sees where one line goes on.

/// The width text headers are wrapped to.
pub const COLUMNS: usize = 80;

/// `text` as `# `-prefixed lines of at most `width` characters, broken between words. A word
/// longer than a line (a long path) is broken across lines.
pub fn comment(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::from("#");
    let mut len = 1;
    let room = width.saturating_sub(4).max(8);
    let words = text.split(' ').filter(|w| !w.is_empty()).flat_map(|w| {
        let chars: Vec<char> = w.chars().collect();
        chars
            .chunks(room)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
    });
    for word in words {
        let word = word.as_str();
        let n = word.chars().count();
        if len > 4 && len + 1 + n > width {
            lines.push(std::mem::replace(&mut line, String::from("#  ")));
            len = 3;
        }
        line.push(' ');
        line.push_str(word);
        len += 1 + n;
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
    }
}
