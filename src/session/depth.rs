//! How much of the stack copy each event's unwinds needed: what `--call-graph dwarf,auto`
//! sizes the copy from (`live::resize` takes it each drain round).

use super::Session;

/// The stack copy each event's unwinds needed: what `--call-graph dwarf,auto` sizes the
/// copy from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackDepth {
    /// The copy size the stacks were asked with (a window starts over when it changes:
    /// stacks of a former size may still be in the rings after an event is re-opened).
    pub size: u64,
    /// Stacks unwound from a copy.
    pub samples: u64,
    /// The largest copy one of them needed (see `unwind::StackNeed`).
    pub need_max: u64,
    /// Stacks that went past the end of a copy as long as asked, and the largest need
    /// among them (exact when the live process finished the stack, else a lower bound).
    pub cut: u64,
    pub cut_need_max: u64,
    /// How many stacks needed each size, in steps of [`NEED_STEP`] bytes (the last holds
    /// every need beyond): `needs[k]` counts needs in `((k-1)*STEP, k*STEP]`.
    pub needs: [u32; NEED_STEPS],
    /// Stacks measured with another copy size since the counts were last taken (left out
    /// of the counts above, which started over when the size changed).
    pub other_sizes: u64,
}

/// The step of [`StackDepth::needs`], and its length (steps up to 64 KiB, the kernel's
/// largest copy).
pub const NEED_STEP: u64 = 256;
pub const NEED_STEPS: usize = 257;

impl Default for StackDepth {
    fn default() -> Self {
        StackDepth {
            size: 0,
            samples: 0,
            need_max: 0,
            cut: 0,
            cut_need_max: 0,
            needs: [0; NEED_STEPS],
            other_sizes: 0,
        }
    }
}

impl StackDepth {
    /// Counts one stack that needed `bytes` of the copy (`cut`: it went past its end).
    pub fn add(&mut self, bytes: u64, cut: bool) {
        self.samples += 1;
        self.need_max = self.need_max.max(bytes);
        if cut {
            self.cut += 1;
            self.cut_need_max = self.cut_need_max.max(bytes);
        }
        let step = usize::try_from(bytes.div_ceil(NEED_STEP)).unwrap_or(usize::MAX);
        if let Some(n) = self.needs.get_mut(step.min(NEED_STEPS - 1)) {
            *n = n.saturating_add(1);
        }
    }

    /// Counts one stack unwound from a copy of `size` bytes (see [`StackDepth::add`]); the
    /// counts start over when the size is another than they were counted at.
    pub(super) fn add_at(&mut self, size: u64, bytes: u64, cut: bool) {
        if self.size != size {
            *self = StackDepth {
                size,
                other_sizes: self.other_sizes + self.samples,
                ..StackDepth::default()
            };
        }
        self.add(bytes, cut);
    }

    /// Adds another window's counts (of the same copy size).
    pub fn merge(&mut self, o: &StackDepth) {
        self.size = o.size;
        self.samples += o.samples;
        self.need_max = self.need_max.max(o.need_max);
        self.cut += o.cut;
        self.cut_need_max = self.cut_need_max.max(o.cut_need_max);
        for (a, b) in self.needs.iter_mut().zip(o.needs.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// The need that all but `1/per` of the stacks stay within (a step's upper end).
    pub fn need_within(&self, per: u64) -> u64 {
        let allowed = self.samples / per;
        let mut above = self.samples;
        for (k, &n) in self.needs.iter().enumerate() {
            above = above.saturating_sub(u64::from(n));
            if above <= allowed {
                return (k as u64 * NEED_STEP).min(self.need_max);
            }
        }
        self.need_max
    }
}

impl Session {
    /// How much stack copy event `ev`'s unwinds needed since the last call; starts over.
    pub fn take_depth(&mut self, ev: usize) -> StackDepth {
        self.depths
            .get_mut(ev)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}
