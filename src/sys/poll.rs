//! poll(2) over borrowed file descriptors.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Waits until one of `fds` is readable (or hung up), or `timeout` passes.
/// Returns the `revents` of each fd, in order; EINTR counts as a timeout.
pub fn poll(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<Vec<i16>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `pfds` is a valid, exclusively borrowed array of `pfds.len()` pollfd
    // structs, and every fd in it is kept open by the BorrowedFd it came from.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
    Ok(pfds
        .iter()
        .map(|p| if rc < 0 { 0 } else { p.revents })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn reports_readable_fd_and_times_out() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let r = poll(&[a.as_fd()], Duration::from_millis(1)).unwrap();
        assert_eq!(r, vec![0]);
        b.write_all(b"x").unwrap();
        let r = poll(&[a.as_fd()], Duration::from_millis(1000)).unwrap();
        assert_ne!(r[0] & libc::POLLIN, 0);
    }
}
