//! Stacks merged by name: the frames' names replace their ids, and the stacks whose names
//! agree become one. Each distinct name is interned once and ranked in string order, so the
//! stacks are merged, ordered and ranked as vectors of small integers (vectors of ranks
//! compare as the vectors of names they stand for) and become strings only when printed:
//! the text report builds the strings of its top stacks alone. Merging 80,000 stacks of a
//! system-wide recording in a BTreeMap keyed by their names' strings took a third of the
//! report's time.

use rustc_hash::FxHashMap;

use super::{RECOVERED, Resolved};
use crate::aggregate::Aggregate;
use crate::config::report::ReportConfig;
use crate::stacks::FrameId;

/// The stacks of one event (or all), merged by name, in the order of their names.
pub struct NamedStacks {
    /// Every name a stack holds, in string order: a stack's entries index it.
    names: Vec<String>,
    /// Each stack (its prefix, then its frames root first, or leaf first under
    /// `--reverse`) as indices of `names`, with its samples or bytes; in the order of the
    /// names, each stack once.
    stacks: Vec<(Vec<u32>, u64)>,
}

impl NamedStacks {
    /// How many distinct stacks there are.
    pub fn len(&self) -> usize {
        self.stacks.len()
    }

    /// The samples (or bytes) of every stack.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|(_, n)| n).sum()
    }

    /// Each stack's names and count, in the order of the names.
    pub fn iter(&self) -> impl Iterator<Item = (Vec<&str>, u64)> {
        self.stacks.iter().map(|(k, n)| (self.names_of(k), *n))
    }

    /// The `n` stacks with the most samples, the ties in the order of their names.
    pub fn top(&self, n: usize) -> Vec<(Vec<&str>, u64)> {
        let mut ranked: Vec<&(Vec<u32>, u64)> = self.stacks.iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked
            .into_iter()
            .take(n)
            .map(|(k, c)| (self.names_of(k), *c))
            .collect()
    }

    fn names_of(&self, key: &[u32]) -> Vec<&str> {
        key.iter()
            .map(|&r| self.names.get(r as usize).map_or("", String::as_str))
            .collect()
    }
}

/// Interns names, and what each frame's names are as ids.
#[derive(Default)]
struct Names {
    ids: FxHashMap<String, u32>,
    /// Each (frame, read from the live process) → its names' ids, root first.
    frames: FxHashMap<(FrameId, bool), Vec<u32>>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(name.to_string(), id);
        id
    }

    /// Appends the names of frame `id` to `out`, each marked when the frame was read from
    /// the live process.
    fn frame(&mut self, res: &Resolved, id: FrameId, recovered: bool, out: &mut Vec<u32>) {
        if let Some(ids) = self.frames.get(&(id, recovered)) {
            out.extend_from_slice(ids);
            return;
        }
        let names = res.names.get(id as usize).map_or(&[][..], Vec::as_slice);
        let ids: Vec<u32> = names
            .iter()
            .map(|n| match recovered {
                true => self.id(&format!("{n} {RECOVERED}")),
                false => self.id(n),
            })
            .collect();
        out.extend_from_slice(&ids);
        self.frames.insert((id, recovered), ids);
    }

    /// The names in string order, and each id's rank in it.
    fn ranked(self) -> (Vec<String>, Vec<u32>) {
        let mut names: Vec<(String, u32)> = self.ids.into_iter().collect();
        names.sort_unstable();
        let mut rank = vec![0u32; names.len()];
        for (r, (_, id)) in names.iter().enumerate() {
            rank[*id as usize] = r as u32;
        }
        (names.into_iter().map(|(n, _)| n).collect(), rank)
    }
}

/// The named stacks of one event (or all), root first, merged by name.
pub fn named_stacks(
    cfg: &ReportConfig,
    agg: &Aggregate,
    res: &Resolved,
    event: Option<usize>,
) -> NamedStacks {
    let mut names = Names::default();
    let mut merged: FxHashMap<Vec<u32>, u64> = FxHashMap::default();
    let (mut ids, mut key): (Vec<FrameId>, Vec<u32>) = (Vec::new(), Vec::new());
    for (&(ev, prefix, stack), &count) in &agg.counts {
        if event.is_some_and(|e| e != ev) {
            continue;
        }
        ids.clear();
        if let Some(stack) = stack {
            agg.book.stacks.frames(stack, &mut ids);
        }
        key.clear();
        key.push(names.id(agg.prefixes.get(prefix).map_or("", String::as_str)));
        // Root first: the frames before the mark were read from the live process.
        let mut recovered = ids.iter().any(|&id| Some(id) == res.recovered_mark);
        for &id in &ids {
            if Some(id) == res.recovered_mark {
                recovered = false;
            }
            names.frame(res, id, recovered, &mut key);
        }
        if cfg.reverse {
            key[1..].reverse();
        }
        match merged.get_mut(key.as_slice()) {
            Some(n) => *n += count,
            None => {
                merged.insert(key.clone(), count);
            }
        }
    }
    let (names, rank) = names.ranked();
    let mut stacks: Vec<(Vec<u32>, u64)> = merged
        .into_iter()
        .map(|(k, n)| (k.iter().map(|&id| rank[id as usize]).collect(), n))
        .collect();
    stacks.sort_unstable();
    NamedStacks { names, stacks }
}
