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
}

impl StackTable {
    /// Interns a stack given root first; None for an empty stack.
    pub fn intern(&mut self, root_first: impl IntoIterator<Item = FrameId>) -> Option<StackId> {
        let mut node = NO_PARENT;
        for frame in root_first {
            node = match self.children.get(&(node, frame)) {
                Some(&n) => n,
                None => {
                    let n = self.nodes.len() as StackId;
                    self.nodes.push((node, frame));
                    self.children.insert((node, frame), n);
                    n
                }
            };
        }
        (node != NO_PARENT).then_some(node)
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
