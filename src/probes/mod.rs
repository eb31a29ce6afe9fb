//! Dynamic probes named by the user: `u:TARGET:SYMBOL[+OFF][(ARGS)]` (entry),
//! `r:TARGET:SYMBOL[(ARGS)]` (return) and `sdt:TARGET:[PROVIDER:]NAME` (USDT).
//!
//! This module holds the syntax (`ProbeSpec`, with fetch arguments as `uprobe_events` takes
//! them), where a target and a symbol are in a file (`resolve`) and the USDT notes
//! (`usdt`). Placing the probes (tracefs `uprobe_events` or the uprobe PMU) and removing them
//! is `live::probes`.

pub(crate) mod carriers;
pub(crate) mod resolve;
pub(crate) mod usdt;

use std::fmt;

/// What a probe spec names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// `u:`: a function's entry, or an instruction `+offset` into it.
    Entry,
    /// `r:`: a function's return.
    Return,
    /// `sdt:`: a USDT probe from `.note.stapsdt`.
    Sdt,
}

/// One parsed probe spec; resolved against files by `resolve` and `usdt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    pub kind: ProbeKind,
    /// A path (contains `/`) or a library or program name (`libc`, `python3`).
    pub target: String,
    /// The function (`u:`, `r:`), a `0x` address in the file, or the USDT probe's name.
    pub symbol: String,
    /// The USDT provider, when named.
    pub provider: Option<String>,
    /// Bytes past the symbol's start (`u:` only).
    pub offset: u64,
    /// Fetch arguments as written to `uprobe_events` (`size=%di:u64`).
    pub args: Vec<FetchArg>,
}

/// A named fetch argument: `name=FETCH:TYPE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchArg {
    pub name: String,
    /// `%di`, `+8(%sp)`, `-16(%bp)`, `$retval`, `$stack2`, `\5`.
    pub fetch: String,
    /// `u64`, `s32`, `x64`, `string`...
    pub type_: String,
}

impl fmt::Display for FetchArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}:{}", self.name, self.fetch, self.type_)
    }
}

/// Errors in a probe spec's syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeSyntaxError {
    #[error(
        "invalid probe `{spec}`: expected `u:TARGET:SYMBOL[+OFFSET][(ARGS)]`, \
         `r:TARGET:SYMBOL[(ARGS)]` or `sdt:TARGET:[PROVIDER:]NAME`, with TARGET a path or a \
         library name such as `libc`"
    )]
    Shape { spec: String },
    #[error("invalid offset `{offset}` in probe `{spec}`: expected a decimal or 0x number")]
    Offset { spec: String, offset: String },
    #[error(
        "probe `{spec}`: a return probe (`r:`) is placed at a function's entry; it takes no `+offset`"
    )]
    ReturnOffset { spec: String },
    #[error(
        "probe `{spec}`: USDT probes (`sdt:`) take their arguments from the note (arg1...); they take no `+offset` or argument list"
    )]
    SdtExtras { spec: String },
    #[error("invalid argument `{arg}` in probe `{spec}`: {reason}")]
    Arg {
        spec: String,
        arg: String,
        reason: String,
    },
}

/// The x86-64 registers `uprobe_events` names, as `%NAME`.
const REGS: &[&str] = &[
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15", "ip", "flags", "cs", "ss",
];

/// The registers of the first six integer arguments (System V x86-64 ABI).
const ARG_REGS: [&str; 6] = ["di", "si", "dx", "cx", "r8", "r9"];

/// The fetch types `uprobe_events` takes.
const TYPES: &[&str] = &[
    "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "x8", "x16", "x32", "x64", "string",
    "ustring",
];

/// Whether an event list item is a probe spec (so that its `/` are a path's).
pub fn is_probe_item(item: &str) -> bool {
    let item = item.trim_start();
    ["u:", "r:", "sdt:"].iter().any(|p| item.starts_with(p))
}

/// Parses `u:libc:malloc(size=%di)`, `r:./app:parse`, `sdt:libc:memory_sbrk_more`.
pub fn parse(spec: &str) -> Result<ProbeSpec, ProbeSyntaxError> {
    let shape = || ProbeSyntaxError::Shape {
        spec: spec.to_string(),
    };
    let (kind, rest) = if let Some(r) = spec.strip_prefix("u:") {
        (ProbeKind::Entry, r)
    } else if let Some(r) = spec.strip_prefix("r:") {
        (ProbeKind::Return, r)
    } else if let Some(r) = spec.strip_prefix("sdt:") {
        (ProbeKind::Sdt, r)
    } else {
        return Err(shape());
    };
    let (head, arg_text) = match rest.find('(') {
        Some(i) => {
            let inner = rest[i + 1..].strip_suffix(')').ok_or_else(shape)?;
            (&rest[..i], Some(inner))
        }
        None => (rest, None),
    };
    let (target, symbol, provider) = if kind == ProbeKind::Sdt {
        let parts: Vec<&str> = head.rsplitn(3, ':').collect();
        match parts.as_slice() {
            [name, provider, target] => (*target, *name, Some(provider.to_string())),
            [name, target] => (*target, *name, None),
            _ => return Err(shape()),
        }
    } else {
        let (t, s) = head.rsplit_once(':').ok_or_else(shape)?;
        (t, s, None)
    };
    let (symbol, offset) = match symbol.split_once('+') {
        Some((s, off)) => {
            let n = parse_number(off).ok_or_else(|| ProbeSyntaxError::Offset {
                spec: spec.to_string(),
                offset: off.to_string(),
            })?;
            (s, n)
        }
        None => (symbol, 0),
    };
    let ok = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
    if !ok(target) || !ok(symbol) || provider.as_deref().is_some_and(|p| !ok(p)) {
        return Err(shape());
    }
    if kind == ProbeKind::Return && offset != 0 {
        return Err(ProbeSyntaxError::ReturnOffset {
            spec: spec.to_string(),
        });
    }
    if kind == ProbeKind::Sdt && (offset != 0 || arg_text.is_some()) {
        return Err(ProbeSyntaxError::SdtExtras {
            spec: spec.to_string(),
        });
    }
    let mut args = match arg_text {
        Some(text) => parse_args(spec, text, kind)?,
        None => Vec::new(),
    };
    if kind == ProbeKind::Return && arg_text.is_none() {
        args.push(FetchArg {
            name: "retval".into(),
            fetch: "$retval".into(),
            type_: "x64".into(),
        });
    }
    Ok(ProbeSpec {
        kind,
        target: target.to_string(),
        symbol: symbol.to_string(),
        provider,
        offset,
        args,
    })
}

/// `0x1c` or `28`.
pub fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `size=%di, n=arg2:u32, +8(%sp):s32, retval` (commas or spaces between).
fn parse_args(spec: &str, text: &str, kind: ProbeKind) -> Result<Vec<FetchArg>, ProbeSyntaxError> {
    let mut out: Vec<FetchArg> = Vec::new();
    let items = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty());
    for (i, item) in items.enumerate() {
        let bad = |reason: String| ProbeSyntaxError::Arg {
            spec: spec.to_string(),
            arg: item.to_string(),
            reason,
        };
        let (name, value) = match item.split_once('=') {
            Some((n, v)) => (Some(n), v),
            None => (None, item),
        };
        let (value, type_) = match value.rsplit_once(':') {
            Some((v, t)) => (v, t),
            None => (value, "u64"),
        };
        if !TYPES.contains(&type_) {
            return Err(bad(format!(
                "unknown type `{type_}`; types are {}",
                TYPES.join(", ")
            )));
        }
        let fetch = fetch_of(value, kind).map_err(bad)?;
        let name = match name {
            Some(n) => n.to_string(),
            None if fetch == "$retval" => "retval".to_string(),
            None if value.starts_with("arg") => value.to_string(),
            None => format!("arg{}", i + 1),
        };
        let ident = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ident || name.starts_with("common_") {
            return Err(bad(format!(
                "`{name}` is not a field name: letters, digits and `_`, not starting with a digit or `common_`"
            )));
        }
        if out.iter().any(|a| a.name == name) {
            return Err(bad(format!("`{name}` is named twice")));
        }
        out.push(FetchArg {
            name,
            fetch,
            type_: type_.to_string(),
        });
    }
    Ok(out)
}

/// One fetch expression, checked: `%reg`, `[+-]OFF(%reg)`, `argN` (the ABI's Nth integer
/// argument), `retval`/`$retval` (return probes), `$stackN`, `\IMM`.
fn fetch_of(value: &str, kind: ProbeKind) -> Result<String, String> {
    let reg = |r: &str| -> Result<String, String> {
        let name = r
            .strip_prefix('%')
            .ok_or_else(|| format!("`{r}` is not a register"))?;
        if REGS.contains(&name) {
            Ok(format!("%{name}"))
        } else {
            Err(format!(
                "unknown register `{r}`; uprobe_events names %{}",
                REGS.join(", %")
            ))
        }
    };
    if let Some(n) = value
        .strip_prefix("arg")
        .and_then(|n| n.parse::<usize>().ok())
    {
        return match ARG_REGS.get(n.wrapping_sub(1)) {
            Some(r) => Ok(format!("%{r}")),
            None => Err("arg1 to arg6 are the integer arguments passed in registers; fetch others with +OFF(%sp)".into()),
        };
    }
    if value == "retval" || value == "$retval" {
        return if kind == ProbeKind::Return {
            Ok("$retval".into())
        } else {
            Err("the return value exists only at a return probe (`r:`)".into())
        };
    }
    if value.starts_with('%') {
        return reg(value);
    }
    if let Some(n) = value.strip_prefix("$stack") {
        return if n.is_empty() || n.parse::<u32>().is_ok() {
            Ok(value.to_string())
        } else {
            Err("expected $stack or $stackN".into())
        };
    }
    if let Some(n) = value.strip_prefix('\\') {
        return parse_number(n)
            .map(|_| value.to_string())
            .ok_or_else(|| "expected an immediate such as \\5 or \\0x10".into());
    }
    if let Some((off, inner)) = value.split_once('(') {
        let inner = inner.strip_suffix(')').ok_or("unbalanced parentheses")?;
        let (sign, digits) = match off.as_bytes().first() {
            Some(b'-') => ("-", &off[1..]),
            Some(b'+') => ("+", &off[1..]),
            _ => ("+", off),
        };
        let n = if digits.is_empty() {
            Some(0)
        } else {
            parse_number(digits)
        };
        let n = n.ok_or_else(|| format!("`{off}` is not an offset"))?;
        return Ok(format!("{sign}{n}({})", reg(inner)?));
    }
    Err("expected %REG, +OFF(%REG), argN, $stackN, \\IMM, or retval at a return probe".to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn arg(name: &str, fetch: &str, type_: &str) -> FetchArg {
        FetchArg {
            name: name.into(),
            fetch: fetch.into(),
            type_: type_.into(),
        }
    }

    #[test]
    fn entry_return_and_sdt_specs() {
        let p = parse("u:/lib/x86_64-linux-gnu/libc.so.6:malloc").unwrap();
        assert_eq!(p.kind, ProbeKind::Entry);
        assert_eq!(p.target, "/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(p.symbol, "malloc");
        assert!(p.args.is_empty());
        let p = parse("u:./app:parse_request+0x1c").unwrap();
        assert_eq!((p.target.as_str(), p.offset), ("./app", 0x1c));
        let p = parse("u:python3:PyObject_Malloc(size=%di)").unwrap();
        assert_eq!(p.args, vec![arg("size", "%di", "u64")]);
        let p = parse("r:libc:malloc").unwrap();
        assert_eq!(p.args, vec![arg("retval", "$retval", "x64")]);
        let p = parse("r:libc:malloc(ret=retval:s64)").unwrap();
        assert_eq!(p.args, vec![arg("ret", "$retval", "s64")]);
        let p = parse("sdt:libc:memory_sbrk_more").unwrap();
        assert_eq!((p.kind, p.provider), (ProbeKind::Sdt, None));
        let p = parse("sdt:/usr/lib/libc.so.6:libc:memory_sbrk_more").unwrap();
        assert_eq!(p.provider.as_deref(), Some("libc"));
        assert_eq!(p.target, "/usr/lib/libc.so.6");
    }

    #[test]
    fn fetch_arguments() {
        let p = parse("u:app:f(a=arg2:s32, +8(%sp):x64 b=-16(%bp):u8,c=\\5,%r12)").unwrap();
        assert_eq!(
            p.args,
            vec![
                arg("a", "%si", "s32"),
                arg("arg2", "+8(%sp)", "x64"),
                arg("b", "-16(%bp)", "u8"),
                arg("c", "\\5", "u64"),
                arg("arg5", "%r12", "u64"),
            ]
        );
    }

    #[test]
    fn bad_specs_say_why() {
        let err = |s: &str| parse(s).unwrap_err().to_string();
        assert!(err("u:malloc").contains("expected `u:TARGET:SYMBOL"));
        assert!(err("r:libc:malloc+4").contains("takes no `+offset`"));
        assert!(err("u:libc:malloc+zz").contains("invalid offset `zz`"));
        assert!(err("u:libc:malloc(size=%edi)").contains("unknown register `%edi`"));
        assert!(err("u:libc:malloc(size=%di:u128)").contains("unknown type `u128`"));
        assert!(err("u:libc:malloc(r=retval)").contains("only at a return probe"));
        assert!(err("u:libc:malloc(a=%di,a=%si)").contains("named twice"));
        assert!(err("u:libc:malloc(common_x=%di)").contains("not a field name"));
        assert!(err("u:libc:malloc(arg7)").contains("arg1 to arg6"));
        assert!(err("sdt:libc:x(a=%di)").contains("take their arguments from the note"));
        assert!(err("u:libc:malloc(size=%di").contains("expected `u:TARGET"));
    }
}
