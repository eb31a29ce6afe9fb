//! System calls as a snoop tool sees them: each `sys_enter_*` sample waits, per thread, for
//! its `sys_exit_*` with the result; the pair is one call.

use rustc_hash::FxHashMap;

use crate::stacks::StackId;

/// A call entered and not yet returned: its event, arguments and stack.
#[derive(Debug, Clone)]
pub struct Entered {
    /// The tool's index of the enter event.
    pub ev: usize,
    pub time: u64,
    pub args: Vec<u64>,
    pub stack: Option<StackId>,
}

/// Calls under way, by thread.
#[derive(Debug, Default)]
pub struct Calls {
    pending: FxHashMap<u32, Entered>,
    /// Enters whose exit never came (a thread that entered a second call: the first one's
    /// exit was lost, or came before tracing started).
    pub unreturned: u64,
    /// Exits without their enter (calls under way when tracing started).
    pub unentered: u64,
}

impl Calls {
    pub fn enter(&mut self, tid: u32, call: Entered) {
        if self.pending.insert(tid, call).is_some() {
            self.unreturned += 1;
        }
    }

    /// The call thread `tid` returns from, if its enter was seen and was one of `evs`.
    pub fn exit(&mut self, tid: u32, enter_ev: usize) -> Option<Entered> {
        match self.pending.remove(&tid) {
            Some(c) if c.ev == enter_ev => Some(c),
            Some(c) => {
                // Another call's enter: this exit's was not seen, that one's exit is lost.
                self.unreturned += 1;
                self.unentered += 1;
                drop(c);
                None
            }
            None => {
                self.unentered += 1;
                None
            }
        }
    }

    /// Calls still under way at the end.
    pub fn open(&self) -> usize {
        self.pending.len()
    }
}

/// `ENOMEM`, `EBADF`... for a negative return, else `errno N`.
pub fn errno_name(ret: i64) -> String {
    let e = (-ret) as i32;
    let name = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EIDRM => "EIDRM",
        libc::EOVERFLOW => "EOVERFLOW",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}
