//! `/proc/kallsyms` parsing: `ADDR TYPE NAME [\t[MODULE]]` lines.

/// Extent given to the highest symbol, which has no successor to end it.
const LAST_SYMBOL_EXTENT: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
struct KSym {
    addr: u64,
    name: Box<str>,
    module: Option<Box<str>>,
}

/// A kernel text symbol found by [`Kallsyms::lookup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    /// The symbol name, without the module suffix.
    pub name: &'a str,
    /// The module (`nf_conntrack` for `[nf_conntrack]`), `None` for the core kernel.
    pub module: Option<&'a str>,
    /// Address minus symbol start.
    pub offset: u64,
}

/// Kernel text symbols sorted by address.
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    syms: Vec<KSym>,
    hidden: bool,
    malformed: usize,
}

fn parse_line(line: &str) -> Option<(u64, char, &str, Option<&str>)> {
    let mut fields = line.split_ascii_whitespace();
    let addr = u64::from_str_radix(fields.next()?, 16).ok()?;
    let mut ty_field = fields.next()?.chars();
    let ty = ty_field.next()?;
    if ty_field.next().is_some() {
        return None;
    }
    let name = fields.next()?;
    let module = match fields.next() {
        Some(m) => Some(m.strip_prefix('[')?.strip_suffix(']')?),
        None => None,
    };
    Some((addr, ty, name, module))
}

impl Kallsyms {
    /// Parses the text of `/proc/kallsyms`. Keeps text symbols (types `t T w W`); counts
    /// lines that do not parse. When every address is zero (`kptr_restrict`), the table is
    /// empty and [`Kallsyms::is_hidden`] is true.
    pub fn from_text(text: &str) -> Kallsyms {
        let mut syms = Vec::new();
        let mut malformed = 0;
        let mut parsed = 0usize;
        let mut nonzero = false;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Some((addr, ty, name, module)) = parse_line(line) else {
                malformed += 1;
                continue;
            };
            parsed += 1;
            nonzero |= addr != 0;
            if matches!(ty, 't' | 'T' | 'w' | 'W') {
                syms.push(KSym {
                    addr,
                    name: name.into(),
                    module: module.map(Into::into),
                });
            }
        }
        let hidden = parsed > 0 && !nonzero;
        if hidden {
            syms.clear();
        }
        syms.sort_by_key(|s| s.addr);
        Kallsyms {
            syms,
            hidden,
            malformed,
        }
    }

    /// True when kptr_restrict hid every address (all zero).
    pub fn is_hidden(&self) -> bool {
        self.hidden
    }

    /// Number of text symbols kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// Lines that did not parse.
    pub fn malformed_lines(&self) -> usize {
        self.malformed
    }

    /// The symbol enclosing `addr`: the last symbol starting at or below it, ending at the
    /// next higher symbol address.
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol<'_>> {
        let idx = self
            .syms
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let sym = self.syms.get(idx)?;
        let end = self.syms[idx..]
            .iter()
            .find(|s| s.addr > sym.addr)
            .map_or(sym.addr.saturating_add(LAST_SYMBOL_EXTENT), |s| s.addr);
        (addr < end).then(|| KernelSymbol {
            name: &sym.name,
            module: sym.module.as_deref(),
            offset: addr - sym.addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81000100 t do_one_initcall
ffffffff81000100 D some_data_alias
ffffffff81000200 T __kmalloc
ffffffff81002000 d data_symbol
garbage line
ffffffffc0a00000 t nf_conntrack_in\t[nf_conntrack]
ffffffffc0a00400 T nf_ct_get_tuple\t[nf_conntrack]
";

    #[test]
    fn parses_text_symbols_and_module_suffixes() {
        let k = Kallsyms::from_text(TEXT);
        assert!(!k.is_hidden());
        assert_eq!(k.len(), 5);
        assert_eq!(k.malformed_lines(), 1);
        let s = k.lookup(0xffffffff81000210);
        assert_eq!(
            s,
            Some(KernelSymbol {
                name: "__kmalloc",
                module: None,
                offset: 0x10
            })
        );
        let m = k.lookup(0xffffffffc0a00010);
        assert_eq!(
            m.map(|s| (s.name, s.module)),
            Some(("nf_conntrack_in", Some("nf_conntrack")))
        );
        assert_eq!(
            k.lookup(0xffffffff81000150).map(|s| s.name),
            Some("do_one_initcall")
        );
        assert_eq!(k.lookup(0xffffffff80000000), None);
    }

    #[test]
    fn last_symbol_has_a_bounded_extent() {
        let k = Kallsyms::from_text(TEXT);
        assert_eq!(
            k.lookup(0xffffffffc0a00400 + 0x10).map(|s| s.name),
            Some("nf_ct_get_tuple")
        );
        assert_eq!(k.lookup(0xffffffffc0a00400 + LAST_SYMBOL_EXTENT), None);
    }

    #[test]
    fn all_zero_addresses_mean_hidden() {
        let k = Kallsyms::from_text("0000000000000000 T _stext\n0000000000000000 t foo\t[mod]\n");
        assert!(k.is_hidden());
        assert!(k.len() == 0);
        assert_eq!(k.lookup(0), None);
    }

    #[test]
    fn bad_module_suffix_is_malformed() {
        let k = Kallsyms::from_text("ffffffff81000000 T x\tnot_bracketed\n");
        assert_eq!(k.malformed_lines(), 1);
        assert!(k.len() == 0);
        assert!(!k.is_hidden());
    }
}
