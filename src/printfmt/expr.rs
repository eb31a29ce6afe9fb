//! The C expressions of a tracepoint's `print fmt` arguments: tokens, a parser to a small
//! tree, and an evaluator over one sample's raw payload.
//!
//! Evaluation follows libtraceevent (what perf script prints with), not C: every value is a
//! `u64`, fields are read zero-extended whatever their `signed:`, comparisons are unsigned,
//! and a cast only truncates to the width of `char`, `short`, `int` and `u8`..`u32` (their
//! signed forms included); the signedness of a value comes back when a conversion such as
//! `%d` prints it. Identifiers other than `REC->field` are kept as [`Expr::Ident`]: the
//! caller decides whether they may appear (flag tables) or make the argument unrenderable.

use crate::perfdata::tracing_data::FieldFormat;

use super::PrintFmtError;
use super::lex::{Tok, syntax};

/// Where a field lies in the raw payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Field {
    pub offset: usize,
    pub size: usize,
    /// Declared as an array (`char comm[16]`).
    pub array: bool,
}

impl Field {
    fn of(f: &FieldFormat) -> Field {
        Field {
            offset: f.offset,
            size: f.size,
            array: f.array_len.is_some(),
        }
    }

    /// The field's bytes, or why they are not in the payload.
    pub fn bytes<'r>(&self, raw: &'r [u8]) -> Result<&'r [u8], PrintFmtError> {
        self.offset
            .checked_add(self.size)
            .and_then(|end| raw.get(self.offset..end))
            .ok_or(PrintFmtError::Truncated)
    }

    /// An integer field, zero-extended (libtraceevent reads every field unsigned).
    fn read(&self, raw: &[u8]) -> Result<u64, PrintFmtError> {
        let b = self.bytes(raw)?;
        let mut buf = [0u8; 8];
        match self.size {
            1 | 2 | 4 | 8 => buf[..self.size].copy_from_slice(b),
            n => return Err(PrintFmtError::FieldSize(n)),
        }
        Ok(u64::from_ne_bytes(buf))
    }

    /// A `__data_loc` (or, with `rel`, `__rel_loc`) field's target: offset in the low 16
    /// bits, length in the high 16 (a 2-byte location reaches the end of the payload).
    pub fn dynamic<'r>(&self, raw: &'r [u8], rel: bool) -> Result<&'r [u8], PrintFmtError> {
        let v = self.read(raw)?;
        let mut start = (v & 0xffff) as usize;
        let len = if self.size == 2 {
            raw.len().saturating_sub(start)
        } else {
            ((v >> 16) & 0xffff) as usize
        };
        if rel {
            start = start.saturating_add(self.offset.saturating_add(self.size));
        }
        raw.get(start..start.saturating_add(len))
            .ok_or(PrintFmtError::Truncated)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum UnOp {
    Neg,
    Plus,
    Not,
    BitNot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Shl,
    Shr,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    BitAnd,
    BitXor,
    BitOr,
    And,
    Or,
}

impl BinOp {
    /// The operator and its C precedence (higher binds tighter).
    fn of(p: &str) -> Option<(BinOp, u8)> {
        use BinOp::*;
        Some(match p {
            "*" => (Mul, 10),
            "/" => (Div, 10),
            "%" => (Rem, 10),
            "+" => (Add, 9),
            "-" => (Sub, 9),
            "<<" => (Shl, 8),
            ">>" => (Shr, 8),
            "<" => (Lt, 7),
            "<=" => (Le, 7),
            ">" => (Gt, 7),
            ">=" => (Ge, 7),
            "==" => (Eq, 6),
            "!=" => (Ne, 6),
            "&" => (BitAnd, 5),
            "^" => (BitXor, 4),
            "|" => (BitOr, 3),
            "&&" => (And, 2),
            "||" => (Or, 1),
            _ => return None,
        })
    }

    fn apply(self, l: u64, r: u64) -> Result<u64, PrintFmtError> {
        use BinOp::*;
        Ok(match self {
            Mul => l.wrapping_mul(r),
            Div => l.checked_div(r).ok_or(PrintFmtError::DivisionByZero)?,
            Rem => l.checked_rem(r).ok_or(PrintFmtError::DivisionByZero)?,
            Add => l.wrapping_add(r),
            Sub => l.wrapping_sub(r),
            // x86 masks the shift count, as the C library's evaluation does there.
            Shl => l.wrapping_shl(r as u32),
            Shr => l.wrapping_shr(r as u32),
            Lt => u64::from(l < r),
            Le => u64::from(l <= r),
            Gt => u64::from(l > r),
            Ge => u64::from(l >= r),
            Eq => u64::from(l == r),
            Ne => u64::from(l != r),
            BitAnd => l & r,
            BitXor => l ^ r,
            BitOr => l | r,
            And => u64::from(l != 0 && r != 0),
            Or => u64::from(l != 0 || r != 0),
        })
    }
}

/// One `{ value, "NAME" }` entry of a `__print_flags` or `__print_symbolic` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// As libtraceevent reads it: a negative value, or a name it does not know, is -1.
    pub value: i64,
    pub name: Vec<u8>,
}

/// A parsed argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expr {
    Num(u64),
    Str(Vec<u8>),
    Ident(String),
    Field(Field),
    /// `REC->field[index]`: elements of `size` bytes from the field's offset.
    Index {
        field: Field,
        size: usize,
        index: Box<Expr>,
    },
    /// A cast, as the mask it applies (`u64::MAX` for types that keep the value).
    Cast(u64, Box<Expr>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Flags {
        value: Box<Expr>,
        delim: Vec<u8>,
        table: Vec<Entry>,
    },
    Symbolic {
        value: Box<Expr>,
        table: Vec<Entry>,
    },
    /// `__get_str(field)`, `__get_rel_str(field)`.
    DynStr {
        loc: Field,
        rel: bool,
    },
    /// `__get_dynamic_array_len(field)` and its `rel` form.
    DynLen {
        loc: Field,
        rel: bool,
    },
}

/// A type name made of C's type words or the kernel's fixed-width and `_t` types.
fn plainly_a_type(ty: &str) -> bool {
    const WORDS: [&str; 21] = [
        "unsigned", "signed", "int", "long", "short", "char", "void", "bool", "struct", "enum",
        "union", "const", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "*",
    ];
    ty.split(' ')
        .all(|w| WORDS.contains(&w) || w.ends_with("_t") || w.starts_with("__"))
}

/// The mask a cast to `ty` applies, as libtraceevent's `eval_type_str`.
fn cast_mask(ty: &str) -> u64 {
    if ty.len() < 2 || ty.ends_with('*') || ty.starts_with("struct") {
        return u64::MAX;
    }
    let base = ty.strip_prefix("unsigned ").unwrap_or(ty);
    match (ty, base) {
        ("u8" | "s8", _) | (_, "char") => 0xff,
        ("u16" | "s16", _) | (_, "short") => 0xffff,
        ("u32" | "s32", _) | (_, "int") => 0xffff_ffff,
        _ => u64::MAX,
    }
}

/// A recursive-descent parser over the tokens of one `print fmt` line.
pub(super) struct Parser<'t> {
    toks: &'t [Tok],
    pos: usize,
    fields: &'t [FieldFormat],
    depth: u32,
}

/// Nesting beyond this is refused rather than risking the stack on hostile input.
const MAX_DEPTH: u32 = 256;

impl<'t> Parser<'t> {
    pub fn new(toks: &'t [Tok], fields: &'t [FieldFormat]) -> Parser<'t> {
        Parser {
            toks,
            pos: 0,
            fields,
            depth: 0,
        }
    }

    pub fn peek(&self) -> Option<&'t Tok> {
        self.toks.get(self.pos)
    }

    fn peek_at(&self, n: usize) -> Option<&'t Tok> {
        self.toks.get(self.pos + n)
    }

    pub fn next(&mut self) -> Option<&'t Tok> {
        let t = self.toks.get(self.pos);
        self.pos += usize::from(t.is_some());
        t
    }

    pub fn at_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    pub fn expect(&mut self, p: &str) -> Result<(), PrintFmtError> {
        if self.at_punct(p) {
            self.pos += 1;
            Ok(())
        } else {
            Err(syntax(format!("expected `{p}`, found {}", self.describe())))
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "the end".to_string(),
            Some(Tok::Num(n)) => format!("`{n}`"),
            Some(Tok::Str(_)) => "a string".to_string(),
            Some(Tok::Ident(i)) => format!("`{i}`"),
            Some(Tok::Punct(p)) => format!("`{p}`"),
        }
    }

    /// A whole expression, up to a `,`, `)`, `}` or the end.
    pub fn expr(&mut self) -> Result<Expr, PrintFmtError> {
        self.deeper()?;
        let r = self.conditional();
        self.depth -= 1;
        r
    }

    fn conditional(&mut self) -> Result<Expr, PrintFmtError> {
        let cond = self.binary(1)?;
        if !self.at_punct("?") {
            return Ok(cond);
        }
        self.pos += 1;
        let yes = self.expr()?;
        self.expect(":")?;
        let no = self.expr()?;
        Ok(Expr::Cond(Box::new(cond), Box::new(yes), Box::new(no)))
    }

    /// Precedence climbing over the binary operators of precedence `min` and above.
    /// Each operator of a chain deepens the tree: it counts towards the nesting limit.
    fn binary(&mut self, min: u8) -> Result<Expr, PrintFmtError> {
        let mut left = self.unary()?;
        let mut chained = 0;
        while let Some(Tok::Punct(p)) = self.peek() {
            let Some((op, prec)) = BinOp::of(p) else {
                break;
            };
            if prec < min {
                break;
            }
            self.pos += 1;
            self.deeper()?;
            chained += 1;
            let right = self.binary(prec + 1)?;
            left = Expr::Binary(op, Box::new(left), Box::new(right));
        }
        self.depth -= chained;
        Ok(left)
    }

    fn deeper(&mut self) -> Result<(), PrintFmtError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(syntax("expression nested too deeply".to_string()));
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<Expr, PrintFmtError> {
        let op = match self.peek() {
            Some(Tok::Punct("-")) => UnOp::Neg,
            Some(Tok::Punct("+")) => UnOp::Plus,
            Some(Tok::Punct("!")) => UnOp::Not,
            Some(Tok::Punct("~")) => UnOp::BitNot,
            _ => return self.primary(),
        };
        self.pos += 1;
        self.deeper()?;
        let e = self.unary();
        self.depth -= 1;
        Ok(Expr::Unary(op, Box::new(e?)))
    }

    fn primary(&mut self) -> Result<Expr, PrintFmtError> {
        match self.next() {
            Some(Tok::Num(n)) => Ok(Expr::Num(*n)),
            Some(Tok::Str(s)) => Ok(Expr::Str(s.clone())),
            Some(Tok::Ident(id)) if id == "REC" => {
                self.expect("->")?;
                let Some(Tok::Ident(name)) = self.next() else {
                    return Err(syntax("expected a field name after `REC->`".to_string()));
                };
                let f = self.field(name)?;
                if !self.at_punct("[") {
                    return Ok(Expr::Field(Field::of(f)));
                }
                self.pos += 1;
                let index = Box::new(self.expr()?);
                self.expect("]")?;
                // As libtraceevent: an array's elements are its size over its length.
                let size = match f.array_len {
                    Some(n) if n > 0 => f.size / n,
                    _ => f.size,
                };
                Ok(Expr::Index {
                    field: Field::of(f),
                    size,
                    index,
                })
            }
            Some(Tok::Ident(id)) if self.at_punct("(") => {
                self.pos += 1;
                let e = self.call(id)?;
                self.expect(")")?;
                Ok(e)
            }
            Some(Tok::Ident(id)) => Ok(Expr::Ident(id.clone())),
            Some(Tok::Punct("(")) => self.paren(),
            _ => {
                self.pos = self.pos.saturating_sub(1);
                Err(syntax(format!("unexpected {}", self.describe())))
            }
        }
    }

    fn field(&self, name: &str) -> Result<&'t FieldFormat, PrintFmtError> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| PrintFmtError::UnknownField(name.to_string()))
    }

    /// After `(`: a cast `(type)operand`, or a parenthesized expression.
    fn paren(&mut self) -> Result<Expr, PrintFmtError> {
        if let Some((ty, len)) = self.type_name() {
            // As libtraceevent: `(x)` before an operand is a cast. Before a unary operator
            // (`(long)-1`) only a name that is plainly a type is, so `(name) - 1` subtracts.
            let operand_follows = match self.peek_at(len) {
                Some(Tok::Num(_) | Tok::Str(_) | Tok::Ident(_) | Tok::Punct("(")) => true,
                Some(Tok::Punct("-" | "+" | "!" | "~")) => plainly_a_type(&ty),
                _ => false,
            };
            if operand_follows {
                self.pos += len;
                self.deeper()?;
                let e = self.unary();
                self.depth -= 1;
                return Ok(Expr::Cast(cast_mask(&ty), Box::new(e?)));
            }
        }
        let e = self.expr()?;
        self.expect(")")?;
        Ok(e)
    }

    /// `ident ident... *...)` from here: the type's text (`unsigned long`, `void *`) and
    /// how many tokens it takes, the `)` included.
    fn type_name(&self) -> Option<(String, usize)> {
        let mut ty = String::new();
        let mut n = 0;
        while let Some(Tok::Ident(id)) = self.peek_at(n) {
            if id == "REC" {
                return None;
            }
            if !ty.is_empty() {
                ty.push(' ');
            }
            ty.push_str(id);
            n += 1;
        }
        if n == 0 {
            return None;
        }
        while self.peek_at(n) == Some(&Tok::Punct("*")) {
            ty.push_str(" *");
            n += 1;
        }
        (self.peek_at(n) == Some(&Tok::Punct(")"))).then_some((ty, n + 1))
    }

    /// The arguments of a helper the kernel's `print fmt` lines call; `(` is consumed,
    /// the caller takes `)`.
    fn call(&mut self, name: &str) -> Result<Expr, PrintFmtError> {
        match name {
            "__print_flags" => {
                let value = Box::new(self.expr()?);
                self.expect(",")?;
                let delim = match self.peek() {
                    Some(Tok::Str(s)) => {
                        self.pos += 1;
                        s.clone()
                    }
                    _ => Vec::new(),
                };
                let table = self.table()?;
                Ok(Expr::Flags {
                    value,
                    delim,
                    table,
                })
            }
            "__print_symbolic" => {
                let value = Box::new(self.expr()?);
                let table = self.table()?;
                Ok(Expr::Symbolic { value, table })
            }
            "__get_str" | "__get_rel_str" => Ok(Expr::DynStr {
                loc: self.field_arg()?,
                rel: name == "__get_rel_str",
            }),
            "__get_dynamic_array_len" | "__get_rel_dynamic_array_len" => Ok(Expr::DynLen {
                loc: self.field_arg()?,
                rel: name.starts_with("__get_rel"),
            }),
            // libtraceevent keeps the first argument.
            "__builtin_expect" => {
                let e = self.expr()?;
                self.expect(",")?;
                self.expr()?;
                Ok(e)
            }
            other => Err(PrintFmtError::UnsupportedFunction(other.to_string())),
        }
    }

    fn field_arg(&mut self) -> Result<Field, PrintFmtError> {
        match self.next() {
            Some(Tok::Ident(name)) => Ok(Field::of(self.field(name)?)),
            _ => Err(syntax("expected a field name".to_string())),
        }
    }

    /// `, { value, "NAME" }, ...` up to the call's `)`.
    fn table(&mut self) -> Result<Vec<Entry>, PrintFmtError> {
        let mut table = Vec::new();
        while self.at_punct(",") {
            self.pos += 1;
            self.expect("{")?;
            let value = table_value(&self.expr()?)?;
            self.expect(",")?;
            let name = table_name(&self.expr()?)?;
            self.expect("}")?;
            table.push(Entry { value, name });
        }
        Ok(table)
    }
}

/// A table entry's value as libtraceevent reads it: the outer casts dropped, a number that
/// is negative or a name it does not know (it knows the softirq and hrtimer names) is -1.
fn table_value(e: &Expr) -> Result<i64, PrintFmtError> {
    const KNOWN: [(&str, i64); 12] = [
        ("HI_SOFTIRQ", 0),
        ("TIMER_SOFTIRQ", 1),
        ("NET_TX_SOFTIRQ", 2),
        ("NET_RX_SOFTIRQ", 3),
        ("BLOCK_SOFTIRQ", 4),
        ("IRQ_POLL_SOFTIRQ", 5),
        ("TASKLET_SOFTIRQ", 6),
        ("SCHED_SOFTIRQ", 7),
        ("HRTIMER_SOFTIRQ", 8),
        ("RCU_SOFTIRQ", 9),
        ("HRTIMER_NORESTART", 0),
        ("HRTIMER_RESTART", 1),
    ];
    match e {
        Expr::Cast(_, inner) => table_value(inner),
        Expr::Ident(name) => Ok(KNOWN
            .iter()
            .find(|(n, _)| n == name)
            .map_or(-1, |&(_, v)| v)),
        e => {
            let v = eval(e, &[])? as i64;
            Ok(if v < 0 { -1 } else { v })
        }
    }
}

/// A table entry's name: a string, or a constant printed in decimal.
fn table_name(e: &Expr) -> Result<Vec<u8>, PrintFmtError> {
    match e {
        Expr::Str(s) => Ok(s.clone()),
        Expr::Cast(_, inner) => table_name(inner),
        e => Ok((eval(e, &[])? as i64).to_string().into_bytes()),
    }
}

/// The first identifier an argument would need a value for, if any.
pub(super) fn unknown_ident(e: &Expr) -> Option<&str> {
    match e {
        Expr::Ident(id) => Some(id),
        Expr::Num(_) | Expr::Str(_) | Expr::Field(_) => None,
        Expr::DynStr { .. } | Expr::DynLen { .. } => None,
        Expr::Cast(_, e) | Expr::Unary(_, e) => unknown_ident(e),
        Expr::Index { index, .. } => unknown_ident(index),
        Expr::Flags { value, .. } | Expr::Symbolic { value, .. } => unknown_ident(value),
        Expr::Binary(_, l, r) => unknown_ident(l).or_else(|| unknown_ident(r)),
        Expr::Cond(c, y, n) => unknown_ident(c)
            .or_else(|| unknown_ident(y))
            .or_else(|| unknown_ident(n)),
    }
}

/// An argument's value for a numeric conversion.
pub(super) fn eval(e: &Expr, raw: &[u8]) -> Result<u64, PrintFmtError> {
    Ok(match e {
        Expr::Num(n) => *n,
        Expr::Field(f) => f.read(raw)?,
        Expr::Index { field, size, index } => {
            let i = usize::try_from(eval(index, raw)?).map_err(|_| PrintFmtError::Truncated)?;
            let offset = i
                .checked_mul(*size)
                .and_then(|o| o.checked_add(field.offset))
                .ok_or(PrintFmtError::Truncated)?;
            Field {
                offset,
                size: *size,
                array: false,
            }
            .read(raw)?
        }
        Expr::Cast(mask, e) => eval(e, raw)? & mask,
        Expr::Unary(op, e) => {
            let v = eval(e, raw)?;
            match op {
                UnOp::Neg => v.wrapping_neg(),
                UnOp::Plus => v,
                UnOp::Not => u64::from(v == 0),
                UnOp::BitNot => !v,
            }
        }
        Expr::Binary(op, l, r) => op.apply(eval(l, raw)?, eval(r, raw)?)?,
        Expr::Cond(c, yes, no) => {
            if eval(c, raw)? != 0 {
                eval(yes, raw)?
            } else {
                eval(no, raw)?
            }
        }
        Expr::DynLen { loc, rel } => loc.dynamic(raw, *rel)?.len() as u64,
        Expr::Ident(id) => return Err(PrintFmtError::UnknownIdent(id.clone())),
        Expr::Str(_) | Expr::Flags { .. } | Expr::Symbolic { .. } | Expr::DynStr { .. } => {
            return Err(PrintFmtError::NotANumber);
        }
    })
}
