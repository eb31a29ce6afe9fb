//! The tokens of a `print fmt` line: C's integer, character and string literals,
//! identifiers and punctuation.

use super::PrintFmtError;

/// A token of a `print fmt` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Tok {
    Num(u64),
    /// A string literal's bytes, escapes kept as written; adjacent literals are joined.
    Str(Vec<u8>),
    Ident(String),
    Punct(&'static str),
}

const PUNCTS: [&str; 32] = [
    "->", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "(", ")", "{", "}", "[", "]", ",", "?",
    ":", "+", "-", "*", "/", "%", "&", "|", "^", "!", "~", "<", ">", "=", ".",
];

/// Splits a `print fmt` line into tokens.
pub(super) fn tokenize(text: &str) -> Result<Vec<Tok>, PrintFmtError> {
    let b = text.as_bytes();
    let mut toks: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'"' {
            let (s, next) = string_literal(b, i)?;
            match toks.last_mut() {
                Some(Tok::Str(prev)) => prev.extend_from_slice(&s),
                _ => toks.push(Tok::Str(s)),
            }
            i = next;
        } else if c == b'\'' {
            let (v, next) = char_literal(b, i)?;
            toks.push(Tok::Num(v));
            i = next;
        } else if c.is_ascii_digit() {
            let end = scan(b, i, |c| c.is_ascii_alphanumeric() || c == b'_');
            toks.push(Tok::Num(int_literal(&text[i..end])?));
            i = end;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = scan(b, i, |c| c.is_ascii_alphanumeric() || c == b'_');
            toks.push(Tok::Ident(text[i..end].to_string()));
            i = end;
        } else if let Some(p) = PUNCTS.iter().find(|p| b[i..].starts_with(p.as_bytes())) {
            toks.push(Tok::Punct(p));
            i += p.len();
        } else {
            return Err(syntax(format!("unexpected character `{}`", char::from(c))));
        }
    }
    Ok(toks)
}

fn scan(b: &[u8], from: usize, ok: impl Fn(u8) -> bool) -> usize {
    b[from..]
        .iter()
        .position(|&c| !ok(c))
        .map_or(b.len(), |n| from + n)
}

pub(super) fn syntax(what: String) -> PrintFmtError {
    PrintFmtError::Syntax(what)
}

/// `"..."` from `b[at]`: its bytes (a backslash and the byte after it kept) and where the
/// token ends.
fn string_literal(b: &[u8], at: usize) -> Result<(Vec<u8>, usize), PrintFmtError> {
    let mut s = Vec::new();
    let mut i = at + 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Ok((s, i + 1)),
            b'\\' if i + 1 < b.len() => {
                s.extend_from_slice(&b[i..i + 2]);
                i += 2;
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(syntax("unterminated string".to_string()))
}

/// `'c'` or `'\n'`-style escapes, as the character's code.
fn char_literal(b: &[u8], at: usize) -> Result<(u64, usize), PrintFmtError> {
    let bad = || syntax("bad character literal".to_string());
    let (v, len) = match b.get(at + 1..).ok_or_else(bad)? {
        [b'\\', e, b'\'', ..] => (
            match e {
                b'n' => b'\n',
                b't' => b'\t',
                b'r' => b'\r',
                b'0' => 0,
                e => *e,
            },
            3,
        ),
        [c, b'\'', ..] if *c != b'\\' => (*c, 2),
        _ => return Err(bad()),
    };
    Ok((u64::from(v), at + 1 + len))
}

/// A C integer literal (decimal, `0x` hex or `0` octal) with `U`, `L`, `UL`, `ULL` suffixes.
fn int_literal(t: &str) -> Result<u64, PrintFmtError> {
    let digits = t.trim_end_matches(['u', 'U', 'l', 'L']);
    let parsed = if let Some(h) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        u64::from_str_radix(h, 16)
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8)
    } else {
        digits.parse()
    };
    parsed.map_err(|_| syntax(format!("bad number `{t}`")))
}
