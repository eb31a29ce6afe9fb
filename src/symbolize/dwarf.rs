//! DWARF line and inline-frame lookups through addr2line, built from `object` sections
//! (decompressed when compressed) without addr2line's `loader` feature.

use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;

use object::{Object, ObjectSection};

use super::demangle::maybe_demangle;

type Reader = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// One frame from DWARF: innermost (inlined) frames come first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DwarfFrame {
    pub name: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A loaded DWARF context for one module.
pub(crate) struct Dwarf {
    ctx: addr2line::Context<Reader>,
}

impl std::fmt::Debug for Dwarf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dwarf")
    }
}

/// Section `id` of `obj`, decompressed. A section that cannot be decompressed is treated
/// as absent and counted in `bad`.
fn load_section(
    obj: &object::File<'_>,
    id: gimli::SectionId,
    endian: gimli::RunTimeEndian,
    bad: &Cell<usize>,
) -> Result<Reader, gimli::Error> {
    let data: Arc<[u8]> = match obj.section_by_name(id.name()) {
        Some(section) => match section.uncompressed_data() {
            Ok(Cow::Borrowed(b)) => Arc::from(b),
            Ok(Cow::Owned(v)) => Arc::from(v),
            Err(_) => {
                bad.set(bad.get() + 1);
                Arc::from(&[][..])
            }
        },
        None => Arc::from(&[][..]),
    };
    Ok(gimli::EndianArcSlice::new(data, endian))
}

/// The DWARF sections of a file, copied out of it (decompressed where compressed): the
/// file's bytes are not needed once these are made.
pub(crate) struct Sections(gimli::Dwarf<Reader>);

impl Dwarf {
    /// Builds a context from the DWARF sections of `obj`; also returns how many sections
    /// could not be decompressed (and were left out).
    pub(crate) fn load(obj: &object::File<'_>) -> Result<(Dwarf, usize), gimli::Error> {
        let (sections, bad) = Dwarf::sections(obj)?;
        Ok((Dwarf::from_sections(sections)?, bad))
    }

    /// The DWARF sections of `obj`, and how many could not be decompressed.
    pub(crate) fn sections(obj: &object::File<'_>) -> Result<(Sections, usize), gimli::Error> {
        let endian = if obj.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let bad = Cell::new(0);
        let dwarf = gimli::Dwarf::load(|id| load_section(obj, id, endian, &bad))?;
        Ok((Sections(dwarf), bad.get()))
    }

    /// The context of `sections` (addr2line parses the units: the file they were copied
    /// from can be let go of first).
    pub(crate) fn from_sections(sections: Sections) -> Result<Dwarf, gimli::Error> {
        let ctx = addr2line::Context::from_dwarf(sections.0)?;
        Ok(Dwarf { ctx })
    }

    /// The frames at `probe` (an SVMA), innermost first; empty when DWARF does not cover it.
    pub(crate) fn frames(
        &self,
        probe: u64,
        demangle: bool,
    ) -> Result<Vec<DwarfFrame>, gimli::Error> {
        let mut iter = self.ctx.find_frames(probe).skip_all_loads()?;
        let mut out = Vec::new();
        while let Some(frame) = iter.next()? {
            let name = match &frame.function {
                Some(f) => Some(maybe_demangle(&f.raw_name()?, demangle)),
                None => None,
            };
            let (file, line) = match frame.location {
                Some(loc) => (loc.file.map(str::to_owned), loc.line),
                None => (None, None),
            };
            out.push(DwarfFrame { name, file, line });
        }
        Ok(out)
    }
}
