//! USDT probes: the `.note.stapsdt` notes `<sys/sdt.h>` leaves in an object (provider, name,
//! address, base, semaphore, argument spec), moved by `.stapsdt.base` when the object was
//! prelinked, with their arguments (`-4@%edi`, `8@-16(%rbp)`) translated into the fetch
//! arguments of `uprobe_events`.

use object::{Object, ObjectSection, ObjectSymbol};

use super::FetchArg;

/// The note type of a USDT probe in the `stapsdt` namespace.
const NT_STAPSDT: u32 = 3;

/// One USDT probe as its note states it, addresses adjusted for `.stapsdt.base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub provider: String,
    pub name: String,
    /// The probe's address (SVMA).
    pub pc: u64,
    /// The semaphore's address (SVMA), 0 when the probe has none.
    pub semaphore: u64,
    /// The argument spec as written (`-4@%edi 8@-16(%rbp)`).
    pub args: String,
}

/// Every USDT note of an object, in file order; none for an object without any.
pub fn notes(file: &object::File<'_>) -> Vec<Note> {
    let Some(sec) = file.section_by_name(".note.stapsdt") else {
        return Vec::new();
    };
    let Ok(data) = sec.data() else {
        return Vec::new();
    };
    let actual_base = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(hdr) = data.get(at..at + 12) {
        let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let (namesz, descsz, type_) = (word(0) as usize, word(4) as usize, word(8));
        let name_at = at + 12;
        let desc_at = name_at + namesz.next_multiple_of(4);
        let next = desc_at + descsz.next_multiple_of(4);
        let name = data.get(name_at..name_at + namesz);
        let desc = data.get(desc_at..desc_at + descsz);
        if let (Some(name), Some(desc)) = (name, desc)
            && type_ == NT_STAPSDT
            && name.starts_with(b"stapsdt")
            && let Some(n) = parse_desc(desc, actual_base)
        {
            out.push(n);
        }
        if next <= at {
            break;
        }
        at = next;
    }
    out
}

/// `pc, base, semaphore` (8 bytes each), then `provider\0name\0args\0`.
fn parse_desc(desc: &[u8], actual_base: Option<u64>) -> Option<Note> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(desc.get(i..i + 8)?.try_into().ok()?))
    };
    let (mut pc, base, mut semaphore) = (word(0)?, word(8)?, word(16)?);
    if let Some(actual) = actual_base
        && base != 0
    {
        // Prelink moved the object: move the addresses by as much as the base moved.
        pc = pc.wrapping_add(actual).wrapping_sub(base);
        if semaphore != 0 {
            semaphore = semaphore.wrapping_add(actual).wrapping_sub(base);
        }
    }
    let mut strings = desc.get(24..)?.split(|&b| b == 0);
    let mut next = || {
        strings
            .next()
            .map(|s| String::from_utf8_lossy(s).into_owned())
    };
    Some(Note {
        provider: next()?,
        name: next()?,
        pc,
        semaphore,
        args: next().unwrap_or_default(),
    })
}

/// The 64-bit register `uprobe_events` names for an x86-64 register of any width.
fn register(r: &str) -> Option<&'static str> {
    Some(match r {
        "rax" | "eax" | "ax" | "al" => "ax",
        "rbx" | "ebx" | "bx" | "bl" => "bx",
        "rcx" | "ecx" | "cx" | "cl" => "cx",
        "rdx" | "edx" | "dx" | "dl" => "dx",
        "rsi" | "esi" | "si" | "sil" => "si",
        "rdi" | "edi" | "di" | "dil" => "di",
        "rbp" | "ebp" | "bp" | "bpl" => "bp",
        "rsp" | "esp" | "sp" | "spl" => "sp",
        "rip" => "ip",
        _ => {
            const HIGH: [&str; 8] = ["r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"];
            let base = r.trim_end_matches(['d', 'w', 'b']);
            let suffix = &r[base.len()..];
            let hit = HIGH.iter().find(|h| **h == base)?;
            if suffix.len() > 1 {
                return None;
            }
            hit
        }
    })
}

/// Translates a note's argument spec into named fetch arguments `arg1`...; `symbol_offset`
/// gives the file offset of a symbol an argument names (`8@counter(%rip)`).
pub fn fetch_args(
    spec: &str,
    symbol_offset: impl Fn(&str) -> Option<u64>,
) -> Result<Vec<FetchArg>, String> {
    spec.split_whitespace()
        .enumerate()
        .map(|(i, a)| {
            let name = format!("arg{}", i + 1);
            one_arg(a, &symbol_offset)
                .map(|(fetch, type_)| FetchArg {
                    name: name.clone(),
                    fetch,
                    type_,
                })
                .map_err(|why| format!("{name} `{a}`: {why}"))
        })
        .collect()
}

fn one_arg(
    arg: &str,
    symbol_offset: &dyn Fn(&str) -> Option<u64>,
) -> Result<(String, String), String> {
    let (size, op) = arg.split_once('@').ok_or("expected SIZE@OPERAND")?;
    let n: i32 = size.parse().map_err(|_| {
        format!("size `{size}` is not an integer size (floating point arguments cannot be fetched)")
    })?;
    let bits = match n.unsigned_abs() {
        b @ (1 | 2 | 4 | 8) => b * 8,
        _ => return Err(format!("size {n} is not 1, 2, 4 or 8 bytes")),
    };
    let type_ = format!("{}{bits}", if n < 0 { 's' } else { 'u' });
    let reg = |r: &str| -> Result<&'static str, String> {
        r.strip_prefix('%')
            .and_then(register)
            .ok_or_else(|| format!("register `{r}` cannot be fetched by uprobe_events"))
    };
    if let Some(imm) = op.strip_prefix('$') {
        let v: i64 = match imm.strip_prefix("0x") {
            Some(h) => i64::from_str_radix(h, 16).map_err(|_| "a symbolic constant".to_string())?,
            None => imm.parse().map_err(|_| "a symbolic constant".to_string())?,
        };
        return Ok((format!("\\{v}"), type_));
    }
    if op.starts_with('%') {
        return Ok((format!("%{}", reg(op)?), type_));
    }
    let (disp, inner) = op
        .split_once('(')
        .ok_or("expected %REG, $IMM or DISP(%REG)")?;
    let inner = inner.strip_suffix(')').ok_or("unbalanced parentheses")?;
    if inner.contains(',') {
        return Err("indexed addressing (base, index, scale) cannot be fetched".into());
    }
    let base = reg(inner)?;
    let number = |d: &str| -> Option<i64> {
        if d.is_empty() {
            return Some(0);
        }
        let (neg, d) = match d.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, d.strip_prefix('+').unwrap_or(d)),
        };
        let v = match d.strip_prefix("0x") {
            Some(h) => i64::from_str_radix(h, 16).ok()?,
            None => d.parse().ok()?,
        };
        Some(if neg { -v } else { v })
    };
    if base == "ip" {
        // A global: `sym(%rip)` or `sym+8(%rip)`, fetched at its file offset.
        let (sym, add) = match disp.split_once(['+', '-']) {
            Some((s, _)) => (s, number(&disp[s.len()..]).ok_or("bad displacement")?),
            None => (disp, 0),
        };
        let off =
            symbol_offset(sym).ok_or_else(|| format!("`{sym}` is not a symbol of the object"))?;
        return Ok((format!("@+{:#x}", off.wrapping_add_signed(add)), type_));
    }
    let d = number(disp).ok_or_else(|| format!("displacement `{disp}` is not a number"))?;
    let sign = if d < 0 { '-' } else { '+' };
    Ok((format!("{sign}{}(%{base})", d.unsigned_abs()), type_))
}

/// The file offset of a data symbol, for `sym(%rip)` arguments.
pub fn data_symbol_offset(file: &object::File<'_>, name: &str) -> Option<u64> {
    let s = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.is_definition() && s.name() == Ok(name))?;
    crate::allocators::file_offset(file, s.address())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fetches(spec: &str) -> Vec<String> {
        fetch_args(spec, |s| (s == "counter").then_some(0x4010))
            .unwrap()
            .iter()
            .map(|a| a.to_string())
            .collect()
    }

    #[test]
    fn argument_specs_become_fetch_args() {
        assert_eq!(
            fetches(
                "-4@%edi 8@-16(%rbp) 8@%rax 1@%r12b -2@8(%rsp) 4@$42 8@counter(%rip) 8@counter+8(%rip) 8@(%rbx)"
            ),
            vec![
                "arg1=%di:s32",
                "arg2=-16(%bp):u64",
                "arg3=%ax:u64",
                "arg4=%r12:u8",
                "arg5=+8(%sp):s16",
                "arg6=\\42:u32",
                "arg7=@+0x4010:u64",
                "arg8=@+0x4018:u64",
                "arg9=+0(%bx):u64",
            ]
        );
        assert!(fetches("").is_empty());
    }

    #[test]
    fn unfetchable_arguments_are_named() {
        let err = |s: &str| fetch_args(s, |_| None).unwrap_err();
        assert!(err("4@%edi 8@(%rax,%rbx,8)").starts_with("arg2 `8@(%rax,%rbx,8)`: indexed"));
        assert!(err("8f@%xmm0").contains("floating point"));
        assert!(err("4@%ah").contains("cannot be fetched"));
        assert!(err("8@nosuch(%rip)").contains("`nosuch` is not a symbol"));
        assert!(err("3@%eax").contains("not 1, 2, 4 or 8"));
    }

    #[test]
    fn note_descriptions_move_with_the_base() {
        let mut desc = Vec::new();
        for w in [0x1000u64, 0x500, 0x4000] {
            desc.extend_from_slice(&w.to_le_bytes());
        }
        desc.extend_from_slice(b"prov\0name\0-4@%edi\0");
        let n = parse_desc(&desc, Some(0x500)).unwrap();
        assert_eq!((n.pc, n.semaphore), (0x1000, 0x4000));
        let n = parse_desc(&desc, Some(0x600)).unwrap();
        assert_eq!((n.pc, n.semaphore), (0x1100, 0x4100));
        assert_eq!(
            (n.provider.as_str(), n.name.as_str(), n.args.as_str()),
            ("prov", "name", "-4@%edi")
        );
        assert_eq!(parse_desc(&desc[..20], None), None);
    }
}
