//! The patterns in event arguments: shell globs of event names (`kmem:mm_page_*`) and
//! the fields a `--filter` expression names.

/// Why glob `pattern` is malformed (a `[` class never closed), `None` when it is not.
pub fn glob_error(pattern: &str) -> Option<String> {
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let mut j = i + 1;
            if matches!(b.get(j), Some(b'!' | b'^')) {
                j += 1;
            }
            // A `]` first in the class is one of its characters.
            if b.get(j) == Some(&b']') {
                j += 1;
            }
            match b[j.min(b.len())..].iter().position(|&c| c == b']') {
                Some(k) => i = j + k,
                None => return Some(format!("the `[` at offset {i} is never closed by a `]`")),
            }
        }
        i += 1;
    }
    None
}

pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The fields a tracepoint filter compares (`len >= 1048576 && (flags & 0x20)` names `len`
/// and `flags`): each identifier just before a comparison operator, outside quotes.
pub fn filter_fields(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut last_ident: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            let end = b[i + 1..]
                .iter()
                .position(|&q| q == c)
                .map_or(b.len(), |p| i + 2 + p);
            i = end;
            last_ident = None;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            last_ident = Some(expr[start..i].to_string());
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let op = match (c, b.get(i + 1)) {
            (b'=' | b'!' | b'<' | b'>', Some(b'=')) => 2,
            (b'&', Some(b'&')) | (b'|', Some(b'|')) => {
                last_ident = None;
                i += 2;
                continue;
            }
            (b'<' | b'>' | b'&' | b'~', _) => 1,
            _ => 0,
        };
        if op > 0 {
            if let Some(f) = last_ident.take() {
                out.push(f);
            }
            i += op;
        } else {
            last_ident = None;
            i += 1;
        }
    }
    out.dedup();
    out
}

/// Shell-style matching of `name` against `pattern` (`*`, `?`, `[abc]`, `[a-z]`, `[!a]`).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, length including ']').
        let (neg, mut i) = match p.first() {
            Some(b'!' | b'^') => (true, 1),
            _ => (false, 0),
        };
        let mut hit = false;
        let start = i;
        while i < p.len() && (p[i] != b']' || i == start) {
            if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
                hit |= (p[i]..=p[i + 2]).contains(&c);
                i += 3;
            } else {
                hit |= p[i] == c;
                i += 1;
            }
        }
        (i < p.len()).then_some((hit != neg, i + 1))
    }
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some(b'*') => (0..=n.len()).any(|k| go(&p[1..], &n[k..])),
            Some(b'?') => !n.is_empty() && go(&p[1..], &n[1..]),
            Some(b'[') => match (n.first(), class(&p[1..], *n.first().unwrap_or(&0))) {
                (Some(_), Some((true, len))) => go(&p[1 + len..], &n[1..]),
                (Some(_), Some((false, _))) | (None, _) => false,
                (Some(&c), None) => c == b'[' && go(&p[1..], &n[1..]),
            },
            Some(&c) => n.first() == Some(&c) && go(&p[1..], &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}
