//! Stack interning: frames become small ids, stacks a prefix tree of frame ids.
//!
//! A stack is stored root first as a path in the tree, so stacks that share their
//! outer frames share nodes, and a stack id is one `u32` however deep it is.

use std::hash::Hash;

use rustc_hash::FxHashMap;

/// A code address as a stack gives it (framehop's `FrameAddress`): the instruction that was
/// executing when the sample was taken, or a return address, whose call is the instruction
/// before it. Names are looked up for [`CodeAddr::lookup`]; outputs print [`CodeAddr::addr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeAddr {
    Ip(u64),
    Return(u64),
}

impl CodeAddr {
    pub fn new(addr: u64, is_return: bool) -> CodeAddr {
        if is_return {
            CodeAddr::Return(addr)
        } else {
            CodeAddr::Ip(addr)
        }
    }

    /// The address as the stack holds it.
    pub fn addr(self) -> u64 {
        match self {
            CodeAddr::Ip(a) | CodeAddr::Return(a) => a,
        }
    }

    pub fn is_return(self) -> bool {
        matches!(self, CodeAddr::Return(_))
    }
}

/// Index of a unique frame in a `FrameTable`.
pub type FrameId = u32;
/// Index of a node of a `StackTable` (the innermost frame of one stack).
pub type StackId = u32;

/// Interns values (unresolved frames, names) into dense ids.
#[derive(Debug)]
pub struct FrameTable<K> {
    ids: FxHashMap<K, FrameId>,
    keys: Vec<K>,
}

impl<K: Hash + Eq + Clone> Default for FrameTable<K> {
    fn default() -> Self {
        FrameTable {
            ids: FxHashMap::default(),
            keys: Vec::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> FrameTable<K> {
    pub fn intern(&mut self, key: &K) -> FrameId {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.keys.len() as FrameId;
        self.keys.push(key.clone());
        self.ids.insert(key.clone(), id);
        id
    }

    pub fn get(&self, id: FrameId) -> Option<&K> {
        self.keys.get(id as usize)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (FrameId, &K)> {
        self.keys.iter().enumerate().map(|(i, k)| (i as FrameId, k))
    }
}

const NO_PARENT: u32 = u32::MAX;

/// A prefix tree of frame ids.
#[derive(Debug, Default)]
pub struct StackTable {
    /// (parent, frame) of each node.
    nodes: Vec<(u32, FrameId)>,
    children: FxHashMap<(u32, FrameId), StackId>,
    /// The path of the stack interned last, root first: (frame, its node). Stacks that come
    /// one after another mostly share their outer frames (every allocation of an insert
    /// loop below the same `main`), and a frame compared with the last path's costs less
    /// than a lookup in `children` (on sqlite3's 441,000 allocation stacks of about 40
    /// frames, the lookups were 7% of the reader's time).
    last: Vec<(FrameId, StackId)>,
}

impl StackTable {
    /// Interns a stack given root first; None for an empty stack.
    pub fn intern(&mut self, root_first: impl IntoIterator<Item = FrameId>) -> Option<StackId> {
        let mut node = NO_PARENT;
        let mut shared = 0;
        for frame in root_first {
            if let Some(&(f, n)) = self.last.get(shared)
                && f == frame
            {
                node = n;
                shared += 1;
                continue;
            }
            // Past the part shared with the last stack: the path from here is this one's.
            self.last.truncate(shared);
            node = self.child(node, frame);
            self.last.push((frame, node));
            shared += 1;
        }
        self.last.truncate(shared);
        (node != NO_PARENT).then_some(node)
    }

    /// The node of `frame` under `parent`, made if new.
    fn child(&mut self, parent: u32, frame: FrameId) -> StackId {
        if let Some(&n) = self.children.get(&(parent, frame)) {
            return n;
        }
        let n = self.nodes.len() as StackId;
        self.nodes.push((parent, frame));
        self.children.insert((parent, frame), n);
        n
    }

    /// The frames of a stack, root first, appended to `out`.
    pub fn frames(&self, id: StackId, out: &mut Vec<FrameId>) {
        let start = out.len();
        let mut node = id;
        while let Some(&(parent, frame)) = self.nodes.get(node as usize) {
            out.push(frame);
            if parent == NO_PARENT {
                break;
            }
            node = parent;
        }
        out[start..].reverse();
    }

    /// The nodes interned (what bounds the agent's memory).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_share_nodes_and_round_trip() {
        let mut t = StackTable::default();
        let a = t.intern([1, 2, 3]);
        let b = t.intern([1, 2, 4]);
        let c = t.intern([1, 2, 3]);
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_eq!(t.len(), 4, "1, 2 shared; 3 and 4 apart");
        let mut out = Vec::new();
        t.frames(b.unwrap_or(0), &mut out);
        assert_eq!(out, vec![1, 2, 4]);
        assert_eq!(t.intern([]), None);
    }

    #[test]
    fn a_stack_after_another_gets_the_node_its_path_has_whatever_it_shares() {
        let mut t = StackTable::default();
        let deep = t.intern([1, 2, 3, 4]);
        // Shorter than the last, a prefix of it, longer again, apart from the root on.
        let prefix = t.intern([1, 2]);
        let again = t.intern([1, 2, 3, 4]);
        let other_root = t.intern([9, 2, 3]);
        let after = t.intern([1, 2, 3]);
        assert_eq!(again, deep);
        let mut out = Vec::new();
        for (id, want) in [
            (prefix, vec![1, 2]),
            (other_root, vec![9, 2, 3]),
            (after, vec![1, 2, 3]),
        ] {
            out.clear();
            t.frames(id.unwrap_or(u32::MAX), &mut out);
            assert_eq!(out, want);
        }
        // The same ids as a table that never had a last stack to compare with.
        let mut fresh = StackTable::default();
        fresh.intern([1, 2, 3, 4]);
        assert_eq!(fresh.intern([1, 2]), prefix);
        fresh.intern([9, 2, 3]);
        assert_eq!(fresh.intern([1, 2, 3]), after);
        assert_eq!(t.len(), 7);
        assert_eq!(t.intern([]), None);
        assert_eq!(t.intern([1, 2]), prefix, "after an empty stack");
    }

    #[test]
    fn frame_table_interns() {
        let mut f = FrameTable::default();
        let x = f.intern(&"x".to_string());
        let y = f.intern(&"y".to_string());
        assert_eq!(f.intern(&"x".to_string()), x);
        assert_ne!(x, y);
        assert_eq!(f.get(y).map(String::as_str), Some("y"));
        assert_eq!(f.len(), 2);
    }
}
