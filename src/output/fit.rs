//! Making a flame graph's title and subtitle fit its width. inferno draws each as one line
//! of monospace text centred at a fixed size (the title at 17 px, the subtitle at 12 px,
//! 0.59 of the size per character) and the image clips what is wider, cutting a long
//! line at both ends. A title is shortened in its middle; a subtitle keeps its first
//! `; `-separated parts (the most important come first) and drops those with no room.

/// inferno's layout, in pixels: the width it lays out an image of no `--width` at, its
/// font size and width ratio, and the pad at each side.
pub const DEFAULT_WIDTH: usize = 1200;
pub const FONT_SIZE: f64 = 12.0;
pub const TITLE_SIZE: f64 = FONT_SIZE + 5.0;
pub const FONT_WIDTH: f64 = 0.59;
pub const XPAD: f64 = 10.0;
/// `Reset Zoom` at the left and `Search` at the right share the title's line.
const BESIDE_TITLE: f64 = 10.0 * FONT_SIZE * FONT_WIDTH + 10.0;

/// The characters of a title that fit between `Reset Zoom` and `Search`.
pub fn title_chars(width: usize) -> usize {
    let room = width as f64 - 2.0 * (XPAD + BESIDE_TITLE);
    (room / (TITLE_SIZE * FONT_WIDTH)).max(8.0) as usize
}

/// The characters of a subtitle that fit in the width.
pub fn subtitle_chars(width: usize) -> usize {
    let room = width as f64 - 2.0 * XPAD;
    (room / (FONT_SIZE * FONT_WIDTH)).max(8.0) as usize
}

/// `title`, shortened in its middle to fit.
pub fn title(title: &str, width: usize) -> String {
    ellipsize(title, title_chars(width))
}

/// `subtitle`'s first parts that fit, the first one shortened if it alone does not.
pub fn subtitle(subtitle: &str, width: usize) -> String {
    let max = subtitle_chars(width);
    if subtitle.chars().count() <= max {
        return subtitle.to_string();
    }
    let mut parts = subtitle.split("; ");
    let mut out = ellipsize(parts.next().unwrap_or_default(), max);
    for p in parts {
        // Room for `; p` and the closing `; ...`.
        if out.chars().count() + 2 + p.chars().count() + 5 > max {
            out.push_str("; ...");
            break;
        }
        out.push_str("; ");
        out.push_str(p);
    }
    out
}

/// `text` cut to `max` characters by leaving out its middle.
fn ellipsize(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let keep = max.saturating_sub(3);
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let mut s: String = text.chars().take(head).collect();
    s.push_str("...");
    s.extend(text.chars().skip(n - tail));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_titles_lose_their_middle() {
        let t = "page-faults: memperf record -e page-faults -o /tmp/a/very/long/path.data -- ./app --with many arguments and then some more to make it long";
        let f = title(t, 1200);
        assert_eq!(f.chars().count(), title_chars(1200));
        assert!(f.starts_with("page-faults: memperf record"), "{f}");
        assert!(f.ends_with("to make it long"), "{f}");
        assert!(f.contains("..."), "{f}");
        assert_eq!(title("short", 1200), "short");
    }

    #[test]
    fn subtitles_keep_their_first_parts() {
        let s = "memperf: 3 samples of x; 0 lost; recorded 2026 on a-very-long-host-name";
        let f = subtitle(s, 300);
        assert!(f.chars().count() <= subtitle_chars(300), "{f}");
        assert!(f.starts_with("memperf: 3 samples of x; 0 lost"), "{f}");
        assert!(f.ends_with("; ..."), "{f}");
        assert_eq!(subtitle(s, 1200), s);
    }
}
