//! Tracepoint payloads through their `print fmt`, as perf script prints them with
//! libtraceevent: `call_site=perf_event_mmap+0x155 ptr=0xffff888102ad7000 bytes_req=4096
//! ... gfp_flags=GFP_KERNEL node=-1 accounted=false`.
//!
//! A format is parsed once per event into literal text and conversions, each with its
//! argument expression ([`expr`]); rendering a sample reads its raw payload. Whatever perf
//! would print from values the file cannot hold (`vmemmap_base`), or that memperf does not
//! evaluate, is an error, and the caller prints the payload another way: a line is either
//! perf's or plainly not.

mod expr;
mod lex;
#[cfg(test)]
mod tests;

use rustc_hash::FxHashMap;

use crate::perfdata::tracing_data::FieldFormat;
use crate::symbolize::Kallsyms;

use expr::{Expr, Parser};
use lex::Tok;

/// Why a `print fmt`, or one payload through it, cannot be printed as perf prints it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrintFmtError {
    #[error("the format has no print fmt")]
    Missing,
    #[error("cannot parse its print fmt: {0}")]
    Syntax(String),
    #[error("its print fmt reads `{0}`, a kernel variable the file does not hold")]
    UnknownIdent(String),
    #[error("its print fmt names a field `{0}` the format does not have")]
    UnknownField(String),
    #[error("its print fmt calls `{0}`, which memperf does not evaluate")]
    UnsupportedFunction(String),
    #[error("its print fmt has a conversion `{0}` memperf does not print")]
    UnsupportedConversion(String),
    #[error("its print fmt has more conversions than arguments")]
    MissingArgument,
    #[error("its print fmt prints with %s an argument that is no string")]
    NotAString,
    #[error("its print fmt computes with a string")]
    NotANumber,
    #[error("a field of {0} bytes is read as an integer")]
    FieldSize(usize),
    #[error("a field lies beyond the end of the payload")]
    Truncated,
    #[error("a division by zero")]
    DivisionByZero,
    #[error("a width or precision out of range")]
    Width,
}

/// A conversion's width or precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Count {
    Fixed(usize),
    /// `*`: the argument before the value.
    Star,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conv {
    /// `d i u x X o`, with the length modifier's count (`hh` -2 .. `ll` 2).
    Int(u8, i8),
    Char,
    Str,
    /// Plain `%p`: glibc's `(nil)` or `0x...`.
    Ptr,
    /// `%pS`/`%pF` (`sym+0xoff`) and `%ps`/`%pf` (`sym`).
    Sym {
        offset: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    alt: bool,
    width: Option<Count>,
    prec: Option<Count>,
    conv: Conv,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(Vec<u8>),
    Conv {
        spec: Spec,
        star: Option<Expr>,
        arg: Expr,
    },
}

/// What payloads point into in the kernel: its functions, for `%pS`, and its printk format
/// strings (the file's), for `const char *` fields printed with `%s`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Kernel<'a> {
    pub kallsyms: Option<&'a Kallsyms>,
    pub printk: Option<&'a FxHashMap<u64, String>>,
}

/// One event's `print fmt`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrintFmt {
    parts: Vec<Part>,
}

/// Widths past this are refused: no real format asks for them, and a hostile one could
/// ask for gigabytes of blanks.
const MAX_WIDTH: usize = 4096;

impl PrintFmt {
    /// Parses the text after `print fmt:` against the event's fields.
    pub fn parse(text: &str, fields: &[FieldFormat]) -> Result<PrintFmt, PrintFmtError> {
        let toks = lex::tokenize(text)?;
        let mut p = Parser::new(&toks, fields);
        let fmt = match p.next() {
            Some(Tok::Str(s)) => s,
            _ => return Err(PrintFmtError::Syntax("no format string".to_string())),
        };
        let mut args = Vec::new();
        while p.at_punct(",") {
            p.next();
            args.push(p.expr()?);
        }
        if p.peek().is_some() {
            p.expect(",")?;
        }
        if let Some(id) = args.iter().find_map(expr::unknown_ident) {
            return Err(PrintFmtError::UnknownIdent(id.to_string()));
        }
        let parts = parse_format(fmt, args.into_iter())?;
        Ok(PrintFmt { parts })
    }

    /// Appends one payload's text to `out`; on error `out` is left as it was.
    pub fn render(
        &self,
        raw: &[u8],
        kernel: Kernel<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), PrintFmtError> {
        let start = out.len();
        let r = self.parts.iter().try_for_each(|part| match part {
            Part::Lit(l) => {
                out.extend_from_slice(l);
                Ok(())
            }
            Part::Conv { spec, star, arg } => {
                let star = star.as_ref().map(|s| star_value(s, raw)).transpose()?;
                convert(spec, star, arg, raw, kernel, out)
            }
        });
        if r.is_err() {
            out.truncate(start);
        }
        r
    }
}

/// The format string into literal text and conversions, each taking its arguments.
fn parse_format(
    fmt: &[u8],
    mut args: impl Iterator<Item = Expr>,
) -> Result<Vec<Part>, PrintFmtError> {
    let mut parts = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    while i < fmt.len() {
        match fmt[i] {
            b'\\' => {
                let c = *fmt.get(i + 1).ok_or_else(|| {
                    PrintFmtError::Syntax("a backslash ends the format".to_string())
                })?;
                lit.push(match c {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    c => c,
                });
                i += 2;
            }
            b'%' if fmt.get(i + 1) == Some(&b'%') => {
                lit.push(b'%');
                i += 2;
            }
            b'%' => {
                let (spec, used) = parse_spec(&fmt[i..])?;
                i += used;
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                let star = if spec.width == Some(Count::Star) || spec.prec == Some(Count::Star) {
                    Some(args.next().ok_or(PrintFmtError::MissingArgument)?)
                } else {
                    None
                };
                let arg = args.next().ok_or(PrintFmtError::MissingArgument)?;
                if spec.conv == Conv::Str {
                    check_string_arg(&arg)?;
                }
                parts.push(Part::Conv { spec, star, arg });
            }
            c => {
                lit.push(c);
                i += 1;
            }
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

/// One conversion from its `%`: the characters libtraceevent accepts before the
/// conversion letter, read by C's grammar; returns the spec and the bytes it took.
fn parse_spec(s: &[u8]) -> Result<(Spec, usize), PrintFmtError> {
    let unsupported = |end: usize| {
        let end = end.min(s.len());
        PrintFmtError::UnsupportedConversion(String::from_utf8_lossy(&s[..end]).into_owned())
    };
    let mut i = 1;
    let mut spec = Spec {
        left: false,
        zero: false,
        plus: false,
        alt: false,
        width: None,
        prec: None,
        conv: Conv::Ptr,
    };
    while let Some(&c) = s.get(i) {
        match c {
            b'-' => spec.left = true,
            b'0' => spec.zero = true,
            b'+' => spec.plus = true,
            b'#' => spec.alt = true,
            _ => break,
        }
        i += 1;
    }
    spec.width = count(s, &mut i);
    if s.get(i) == Some(&b'.') {
        i += 1;
        spec.prec = Some(count(s, &mut i).unwrap_or(Count::Fixed(0)));
    }
    if spec.width == Some(Count::Star) && spec.prec == Some(Count::Star) {
        return Err(unsupported(i + 1));
    }
    let len_start = i;
    while matches!(s.get(i), Some(b'h' | b'l' | b'L' | b'z' | b'Z')) {
        i += 1;
    }
    let len = match &s[len_start..i] {
        b"" => 0,
        b"hh" => -2,
        b"h" => -1,
        b"l" | b"z" | b"Z" => 1,
        b"ll" | b"L" => 2,
        _ => return Err(unsupported(i + 1)),
    };
    let conv = *s.get(i).ok_or_else(|| unsupported(i))?;
    i += 1;
    spec.conv = match conv {
        b'd' | b'i' | b'u' | b'x' | b'X' | b'o' => Conv::Int(conv, len),
        b'c' => Conv::Char,
        b's' if len == 0 => Conv::Str,
        b'p' => match s.get(i) {
            Some(b'S' | b'F') => Conv::Sym { offset: true },
            Some(b's' | b'f') => Conv::Sym { offset: false },
            Some(b'M' | b'm' | b'I' | b'i' | b'U' | b'h') => return Err(unsupported(i + 1)),
            _ => Conv::Ptr,
        },
        _ => return Err(unsupported(i)),
    };
    if matches!(spec.conv, Conv::Sym { .. }) {
        i += 1;
    }
    Ok((spec, i))
}

/// Digits or `*` at `s[*i]`.
fn count(s: &[u8], i: &mut usize) -> Option<Count> {
    if s.get(*i) == Some(&b'*') {
        *i += 1;
        return Some(Count::Star);
    }
    let start = *i;
    let mut n: usize = 0;
    while let Some(d) = s.get(*i).filter(|c| c.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(usize::from(d - b'0'));
        *i += 1;
    }
    (*i > start).then_some(Count::Fixed(n))
}

/// What `%s` prints must be a string, a field, a flag or symbol table, or a choice of them.
fn check_string_arg(e: &Expr) -> Result<(), PrintFmtError> {
    match e {
        Expr::Str(_) | Expr::DynStr { .. } | Expr::Flags { .. } | Expr::Symbolic { .. } => Ok(()),
        Expr::Field(_) => Ok(()),
        // `((void *)0)`: libtraceevent prints nothing for a cast.
        Expr::Cast(_, zero) if **zero == Expr::Num(0) => Ok(()),
        Expr::Cond(_, yes, no) => check_string_arg(yes).and_then(|()| check_string_arg(no)),
        _ => Err(PrintFmtError::NotAString),
    }
}

/// A `*` argument, as the C `int` printf takes; libtraceevent passes no negative one on.
fn star_value(e: &Expr, raw: &[u8]) -> Result<usize, PrintFmtError> {
    let v = expr::eval(e, raw)? as i32;
    usize::try_from(v)
        .ok()
        .filter(|&v| v <= MAX_WIDTH)
        .ok_or(PrintFmtError::Width)
}

fn convert(
    spec: &Spec,
    star: Option<usize>,
    arg: &Expr,
    raw: &[u8],
    kernel: Kernel<'_>,
    out: &mut Vec<u8>,
) -> Result<(), PrintFmtError> {
    let resolve = |c: Option<Count>| -> Result<Option<usize>, PrintFmtError> {
        match c {
            None => Ok(None),
            Some(Count::Star) => Ok(star),
            Some(Count::Fixed(n)) if n <= MAX_WIDTH => Ok(Some(n)),
            Some(Count::Fixed(_)) => Err(PrintFmtError::Width),
        }
    };
    let width = resolve(spec.width)?.unwrap_or(0);
    let prec = resolve(spec.prec)?;
    match spec.conv {
        Conv::Int(conv, len) => {
            let digits = Digits::of(expr::eval(arg, raw)?, conv, len, spec, prec);
            digits.pad(spec, width, prec, out);
        }
        Conv::Char => {
            let c = [expr::eval(arg, raw)? as u8];
            pad_bytes(&c, spec.left, width, out);
        }
        Conv::Str => {
            let s = StrSpec {
                left: spec.left,
                width,
                prec,
            };
            string_arg(arg, raw, kernel, s, out)?;
        }
        Conv::Ptr => match expr::eval(arg, raw)? {
            0 => out.extend_from_slice(b"(nil)"),
            v => put_hex(v, out),
        },
        Conv::Sym { offset } => {
            let v = expr::eval(arg, raw)?;
            match kernel.kallsyms.and_then(|k| k.lookup(v)) {
                Some(sym) => {
                    out.extend_from_slice(sym.name.as_bytes());
                    if offset {
                        out.extend_from_slice(b"+");
                        put_hex(sym.offset, out);
                    }
                }
                None => put_hex(v, out),
            }
        }
    }
    Ok(())
}

/// `0x` and lowercase hex digits.
fn put_hex(v: u64, out: &mut Vec<u8>) {
    let d = Digits::new(v, 16, false);
    out.extend_from_slice(b"0x");
    out.extend_from_slice(d.as_bytes());
}

/// A `%s` conversion's flag, width and precision.
#[derive(Debug, Clone, Copy)]
struct StrSpec {
    left: bool,
    width: usize,
    prec: Option<usize>,
}

/// `%s` of an argument, as libtraceevent's `print_str_arg`.
fn string_arg(
    arg: &Expr,
    raw: &[u8],
    kernel: Kernel<'_>,
    spec: StrSpec,
    out: &mut Vec<u8>,
) -> Result<(), PrintFmtError> {
    let put = |s: &[u8], out: &mut Vec<u8>| {
        let s = spec.prec.map_or(s, |p| &s[..p.min(s.len())]);
        pad_bytes(s, spec.left, spec.width, out);
    };
    match arg {
        Expr::Str(s) => put(s, out),
        // A pointer: the kernel string at that address if the file has it, else the
        // address in bare hex, whatever the width.
        Expr::Field(f) if !f.array && f.size == 8 => {
            let addr = u64::from_ne_bytes(
                f.bytes(raw)?
                    .try_into()
                    .map_err(|_| PrintFmtError::Truncated)?,
            );
            match kernel.printk.and_then(|p| p.get(&addr)) {
                Some(s) => out.extend_from_slice(s.as_bytes()),
                None => {
                    let d = Digits::new(addr, 16, false);
                    out.extend_from_slice(d.as_bytes());
                }
            }
        }
        Expr::Field(f) => {
            let bytes = if f.size == 0 {
                raw.get(f.offset..).ok_or(PrintFmtError::Truncated)?
            } else {
                f.bytes(raw)?
            };
            put(c_string(bytes), out);
        }
        // An empty dynamic string prints nothing, not even the padding.
        Expr::DynStr { loc, rel } => {
            let s = loc.dynamic(raw, *rel)?;
            if !s.is_empty() {
                put(c_string(s), out);
            }
        }
        Expr::Flags {
            value,
            delim,
            table,
        } => {
            let val = expr::eval(value, raw)? as i64;
            flags(val, delim, table, |name, out| put(name, out), out);
        }
        Expr::Symbolic { value, table } => {
            let val = expr::eval(value, raw)? as i64;
            match table.iter().find(|e| e.value == val) {
                Some(e) => put(&e.name, out),
                None => put_hex(val as u64, out),
            }
        }
        Expr::Cond(c, yes, no) => {
            let branch = if expr::eval(c, raw)? != 0 { yes } else { no };
            string_arg(branch, raw, kernel, spec, out)?;
        }
        Expr::Cast(..) => {}
        _ => return Err(PrintFmtError::NotAString),
    }
    Ok(())
}

/// `__print_flags`, as libtraceevent prints it: each name whose bits are all set, in table
/// order, its bits then cleared; what is left in hex; for zero, the first entry whose value
/// it reads as -1 (a name it does not know).
fn flags(
    mut val: i64,
    delim: &[u8],
    table: &[expr::Entry],
    put: impl Fn(&[u8], &mut Vec<u8>),
    out: &mut Vec<u8>,
) {
    let mut printed = false;
    for e in table {
        if val == 0 && e.value < 0 {
            put(&e.name, out);
            return;
        }
        if e.value > 0 && val & e.value == e.value {
            if printed {
                out.extend_from_slice(delim);
            }
            put(&e.name, out);
            printed = true;
            val &= !e.value;
        }
    }
    if val != 0 {
        if printed {
            out.extend_from_slice(delim);
        }
        put_hex(val as u64, out);
    }
}

/// Up to the first NUL.
fn c_string(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

fn pad_bytes(s: &[u8], left: bool, width: usize, out: &mut Vec<u8>) {
    let fill = width.saturating_sub(s.len());
    if !left {
        out.resize(out.len() + fill, b' ');
    }
    out.extend_from_slice(s);
    if left {
        out.resize(out.len() + fill, b' ');
    }
}

/// An integer's digits, sign and prefix, as glibc's printf lays them out.
struct Digits {
    buf: [u8; 24],
    start: usize,
    neg: bool,
    /// `0x`/`0X` under `#` for a non-zero hex value.
    prefix: &'static [u8],
}

impl Digits {
    fn new(mut v: u64, radix: u64, upper: bool) -> Digits {
        let mut buf = [0u8; 24];
        let mut i = buf.len();
        loop {
            let d = (v % radix) as u8;
            i -= 1;
            buf[i] = match d {
                0..=9 => b'0' + d,
                _ if upper => b'A' + d - 10,
                _ => b'a' + d - 10,
            };
            v /= radix;
            if v == 0 {
                break;
            }
        }
        Digits {
            buf,
            start: i,
            neg: false,
            prefix: b"",
        }
    }

    /// The value as printf gets it from libtraceevent: cast to `char`, `short`, `int`,
    /// `long` or `long long` by the length modifier, then converted.
    fn of(val: u64, conv: u8, len: i8, spec: &Spec, prec: Option<usize>) -> Digits {
        let bits = match len {
            -2 => 8,
            -1 => 16,
            0 => 32,
            _ => 64,
        };
        let shift = 64 - bits;
        let unsigned = (val << shift) >> shift;
        let signed = ((val << shift) as i64) >> shift;
        let mut d = match conv {
            b'd' | b'i' => {
                let mut d = Digits::new(signed.unsigned_abs(), 10, false);
                d.neg = signed < 0;
                d
            }
            b'x' | b'X' => {
                let mut d = Digits::new(unsigned, 16, conv == b'X');
                if spec.alt && unsigned != 0 {
                    d.prefix = if conv == b'X' { b"0X" } else { b"0x" };
                }
                d
            }
            b'o' => Digits::new(unsigned, 8, false),
            _ => Digits::new(unsigned, 10, false),
        };
        // A zero precision prints no digit for zero (`%#o` keeps its 0).
        if prec == Some(0) && d.as_bytes() == b"0" && !(conv == b'o' && spec.alt) {
            d.start = d.buf.len();
        }
        d
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn pad(&self, spec: &Spec, width: usize, prec: Option<usize>, out: &mut Vec<u8>) {
        let digits = self.as_bytes();
        let mut zeros = prec.unwrap_or(0).saturating_sub(digits.len());
        if spec.alt
            && matches!(spec.conv, Conv::Int(b'o', _))
            && zeros == 0
            && !digits.starts_with(b"0")
        {
            zeros = 1;
        }
        let sign: &[u8] = match (self.neg, spec.plus, spec.conv) {
            (true, _, _) => b"-",
            (false, true, Conv::Int(b'd' | b'i', _)) => b"+",
            _ => b"",
        };
        let body = sign.len() + self.prefix.len() + zeros + digits.len();
        let fill = width.saturating_sub(body);
        if spec.zero && !spec.left && prec.is_none() {
            zeros += fill;
        } else if !spec.left {
            out.resize(out.len() + fill, b' ');
        }
        out.extend_from_slice(sign);
        out.extend_from_slice(self.prefix);
        out.resize(out.len() + zeros, b'0');
        out.extend_from_slice(digits);
        if spec.left {
            out.resize(out.len() + fill, b' ');
        }
    }
}
