//! Starting the `-- COMMAND` child stopped at a gate, so events can be opened on its pid
//! (with `enable_on_exec`) before it runs a single instruction of the command.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatusInfo {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatusInfo {
    /// The exit code a shell would report: the code, or 128 + the signal number.
    pub fn shell_code(&self) -> i32 {
        match *self {
            ExitStatusInfo::Exited(code) => code,
            ExitStatusInfo::Signaled(sig) => 128 + sig,
        }
    }

    fn from_wait_status(status: libc::c_int) -> Option<ExitStatusInfo> {
        if libc::WIFEXITED(status) {
            Some(ExitStatusInfo::Exited(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(ExitStatusInfo::Signaled(libc::WTERMSIG(status)))
        } else {
            None
        }
    }
}

/// Where the command's standard output goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CommandStdout {
    /// memperf's own standard output, as perf record and memleak leave it.
    #[default]
    Inherit,
    /// memperf's standard error: memperf's standard output carries data (folded stacks, a
    /// profile, a flame graph) that the command's lines would corrupt.
    Stderr,
}

/// A forked child waiting for `release` before it execs the command.
pub struct GatedChild {
    pid: i32,
    command: String,
    /// Write end of the gate pipe; closing it after one byte lets the child exec.
    gate: Option<OwnedFd>,
    /// Read end of the close-on-exec pipe the child reports a failed exec through.
    exec_error: Option<OwnedFd>,
}

/// A child that has exec'd the command.
#[derive(Debug)]
pub struct RunningChild {
    pid: i32,
    status: Option<ExitStatusInfo>,
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are new descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `io::Error`'s text for an errno without the " (os error N)" suffix.
fn errno_text(errno: i32) -> String {
    let text = io::Error::from_raw_os_error(errno).to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The child side between fork and exec. Only async-signal-safe calls: read, write, dup2,
/// sigprocmask, execvp, _exit.
///
/// # Safety
/// Must only run in a freshly forked child; `argv` must be a null-terminated array of valid
/// C strings.
unsafe fn child_after_fork(
    gate: i32,
    err: i32,
    stdout: CommandStdout,
    argv: &[*const libc::c_char],
) -> ! {
    // SAFETY: each call is async-signal-safe and gets valid pointers to stack or
    // pre-fork-allocated memory; the function never returns.
    unsafe {
        let mut byte = 0u8;
        loop {
            let n = libc::read(gate, (&raw mut byte).cast(), 1);
            if n == 1 {
                break;
            }
            if n == 0 || *libc::__errno_location() != libc::EINTR {
                // The parent went away without releasing us.
                libc::_exit(127);
            }
        }
        if stdout == CommandStdout::Stderr
            && libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) < 0
        {
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(err, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execvp(argv[0], argv.as_ptr());
        let errno = *libc::__errno_location();
        let bytes = errno.to_ne_bytes();
        libc::write(err, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

impl GatedChild {
    /// Forks a child that waits for `release`, then execs `argv` (searched in `PATH`) with
    /// its standard output where `stdout` says.
    pub fn spawn(argv: &[OsString], stdout: CommandStdout) -> io::Result<GatedChild> {
        let Some(first) = argv.first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no command given to run",
            ));
        };
        let command = first.to_string_lossy().into_owned();
        let cstrings = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("an argument of `{command}` contains a NUL byte"),
                )
            })?;
        let mut ptrs: Vec<*const libc::c_char> = cstrings.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let (gate_r, gate_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;

        // SAFETY: fork has no memory-safety preconditions; the child branch only makes
        // async-signal-safe calls on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: we are the freshly forked child; `ptrs` is null-terminated and points
            // into `cstrings`, alive here.
            unsafe { child_after_fork(gate_r.as_raw_fd(), err_w.as_raw_fd(), stdout, &ptrs) }
        }
        drop((gate_r, err_w));
        Ok(GatedChild {
            pid,
            command,
            gate: Some(gate_w),
            exec_error: Some(err_r),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Opens the gate and waits until the child has exec'd (or failed to).
    pub fn release(mut self) -> io::Result<RunningChild> {
        let pid = self.pid;
        let (gate, err_pipe) = (self.gate.take(), self.exec_error.take());
        let command = std::mem::take(&mut self.command);
        // Nothing is left for Drop to clean up from here on.
        self.pid = 0;
        let (Some(gate), Some(err_pipe)) = (gate, err_pipe) else {
            return Err(io::Error::other("child was already released"));
        };
        let byte = [1u8];
        // SAFETY: writing one byte from a valid buffer to our pipe.
        let n = unsafe { libc::write(gate.as_raw_fd(), byte.as_ptr().cast(), 1) };
        if n != 1 {
            let err = io::Error::last_os_error();
            kill_and_reap(pid);
            return Err(io::Error::new(
                err.kind(),
                format!("failed to start `{command}`: {err}"),
            ));
        }
        drop(gate);
        let mut buf = [0u8; 4];
        let n = loop {
            // SAFETY: reading at most 4 bytes into a 4-byte buffer.
            let n = unsafe { libc::read(err_pipe.as_raw_fd(), buf.as_mut_ptr().cast(), 4) };
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        if n == 4 {
            let errno = i32::from_ne_bytes(buf);
            reap(pid);
            let kind = io::Error::from_raw_os_error(errno).kind();
            return Err(io::Error::new(
                kind,
                format!("failed to execute `{command}`: {}", errno_text(errno)),
            ));
        }
        Ok(RunningChild { pid, status: None })
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        if self.pid > 0 {
            kill_and_reap(self.pid);
        }
    }
}

fn kill_and_reap(pid: i32) {
    // SAFETY: signalling our own unreaped child, so the pid cannot have been reused.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    reap(pid);
}

fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

impl RunningChild {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn wait_flags(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatusInfo>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        loop {
            let mut status = 0;
            // SAFETY: waiting for our own child with a valid status pointer.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            if rc == 0 {
                return Ok(None);
            }
            if rc < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(io::Error::new(
                    err.kind(),
                    format!("failed to wait for child {}: {err}", self.pid),
                ));
            }
            // Stopped/continued reports are not exits; keep waiting (or report none yet).
            if let Some(info) = ExitStatusInfo::from_wait_status(status) {
                self.status = Some(info);
                return Ok(Some(info));
            }
            if flags & libc::WNOHANG != 0 {
                return Ok(None);
            }
        }
    }

    /// The exit status if the child has ended, without blocking.
    /// Stops the command if it still runs: SIGTERM, then SIGKILL after `grace`; reaps it.
    /// Returns whether it was running.
    pub fn stop(&mut self, grace: std::time::Duration) -> io::Result<bool> {
        if self.try_wait()?.is_some() {
            return Ok(false);
        }
        self.kill(libc::SIGTERM)?;
        let deadline = std::time::Instant::now() + grace;
        while self.try_wait()?.is_none() {
            if std::time::Instant::now() >= deadline {
                self.kill(libc::SIGKILL)?;
                self.wait()?;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(true)
    }

    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatusInfo>> {
        self.wait_flags(libc::WNOHANG)
    }

    /// Blocks until the child ends.
    pub fn wait(&mut self) -> io::Result<ExitStatusInfo> {
        match self.wait_flags(0)? {
            Some(info) => Ok(info),
            None => Err(io::Error::other(format!(
                "waitpid returned no status for child {}",
                self.pid
            ))),
        }
    }

    /// Sends `sig`; a no-op once the child has been reaped (its pid may be reused).
    pub fn kill(&self, sig: i32) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // SAFETY: signalling our own unreaped child.
        if unsafe { libc::kill(self.pid, sig) } != 0 {
            let err = io::Error::last_os_error();
            return Err(io::Error::new(
                err.kind(),
                format!("failed to send signal {sig} to child {}: {err}", self.pid),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn true_exits_zero() {
        let child = GatedChild::spawn(&args(&["true"]), CommandStdout::Inherit).unwrap();
        assert!(child.pid() > 0);
        let mut running = child.release().unwrap();
        assert_eq!(running.wait().unwrap(), ExitStatusInfo::Exited(0));
        // Cached after reaping.
        assert_eq!(running.try_wait().unwrap(), Some(ExitStatusInfo::Exited(0)));
    }

    #[test]
    fn exit_code_is_reported() {
        let mut running = GatedChild::spawn(&args(&["sh", "-c", "exit 3"]), CommandStdout::Inherit)
            .unwrap()
            .release()
            .unwrap();
        let status = running.wait().unwrap();
        assert_eq!(status, ExitStatusInfo::Exited(3));
        assert_eq!(status.shell_code(), 3);
    }

    #[test]
    fn missing_command_is_a_clear_error() {
        let child = GatedChild::spawn(
            &args(&["memperf-no-such-command-xyz"]),
            CommandStdout::Inherit,
        )
        .unwrap();
        let err = child.release().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            "failed to execute `memperf-no-such-command-xyz`: No such file or directory"
        );
        assert!(GatedChild::spawn(&[], CommandStdout::Inherit).is_err());
    }

    #[test]
    fn child_waits_for_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let script = format!("touch {}", marker.display());
        let child =
            GatedChild::spawn(&args(&["sh", "-c", &script]), CommandStdout::Inherit).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!marker.exists(), "child ran before release");
        let mut running = child.release().unwrap();
        assert_eq!(running.wait().unwrap(), ExitStatusInfo::Exited(0));
        assert!(marker.exists());
    }

    #[test]
    fn unreleased_child_is_killed_and_reaped() {
        let child = GatedChild::spawn(&args(&["true"]), CommandStdout::Inherit).unwrap();
        let pid = child.pid();
        drop(child);
        // Reaped: no such child any more.
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert_eq!(rc, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::ECHILD)
        );
    }

    #[test]
    fn signals_map_to_shell_codes() {
        let mut running = GatedChild::spawn(&args(&["sleep", "10"]), CommandStdout::Inherit)
            .unwrap()
            .release()
            .unwrap();
        assert_eq!(running.try_wait().unwrap(), None);
        running.kill(libc::SIGTERM).unwrap();
        let status = running.wait().unwrap();
        assert_eq!(status, ExitStatusInfo::Signaled(libc::SIGTERM));
        assert_eq!(status.shell_code(), 143);
        // Killing a reaped child is a no-op, not an error or a stray signal.
        running.kill(libc::SIGTERM).unwrap();
    }
}
