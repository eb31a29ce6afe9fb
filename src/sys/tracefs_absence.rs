//! Why a kernel has no usable tracefs, when memperf could neither find nor mount one: built
//! without tracing, or locked down for confidentiality. Both leave the directory empty or
//! absent and the mount failing or empty, which alone reads like a missing mount; the
//! answer is in `/proc/filesystems` and the lockdown state, and only these tell the user
//! that no mount will help (benches/kernels.sh boots such kernels).

use std::fs;

use super::tracefs::TracefsError;

const FILESYSTEMS: &str = "/proc/filesystems";
const LOCKDOWN: &str = "/sys/kernel/security/lockdown";
const CMDLINE: &str = "/proc/cmdline";

/// What the kernel says about itself, read once when tracefs could not be had.
#[derive(Debug, Default)]
pub(crate) struct KernelSays<'a> {
    /// `/sys/kernel/security/lockdown` (`none integrity [confidentiality]`); absent where
    /// securityfs is not mounted or the kernel has no lockdown LSM.
    pub lockdown: Option<&'a str>,
    /// `/proc/cmdline`, for `lockdown=confidentiality` where securityfs is not mounted.
    pub cmdline: Option<&'a str>,
    /// `/proc/filesystems`.
    pub filesystems: Option<&'a str>,
}

/// Reads the kernel's answers and explains, or `None` when they explain nothing.
pub(crate) fn why_absent() -> Option<TracefsError> {
    let lockdown = fs::read_to_string(LOCKDOWN).ok();
    let cmdline = fs::read_to_string(CMDLINE).ok();
    let filesystems = fs::read_to_string(FILESYSTEMS).ok();
    explain(&KernelSays {
        lockdown: lockdown.as_deref(),
        cmdline: cmdline.as_deref(),
        filesystems: filesystems.as_deref(),
    })
}

/// Lockdown first: a locked-down kernel has tracefs registered but empty (Linux's
/// `tracing_init_dentry` refuses under `LOCKDOWN_TRACEFS`, a confidentiality reason).
pub(crate) fn explain(k: &KernelSays) -> Option<TracefsError> {
    if let Some(evidence) = confidentiality(k) {
        return Some(TracefsError::LockedDown { evidence });
    }
    // tracefs is registered by every kernel built with tracing since 4.1; one built
    // without it lists neither it nor (then) a debugfs `tracing/`.
    let fs = k.filesystems?;
    let registered = fs
        .lines()
        .any(|line| line.split_whitespace().last() == Some("tracefs"));
    (!registered).then_some(TracefsError::NotBuiltIn)
}

/// Where the kernel says it is locked down for confidentiality.
fn confidentiality(k: &KernelSays) -> Option<String> {
    if let Some(text) = k.lockdown {
        return text
            .contains("[confidentiality]")
            .then(|| format!("{LOCKDOWN} says {}", text.trim()));
    }
    let booted = k
        .cmdline?
        .split_whitespace()
        .any(|arg| arg == "lockdown=confidentiality");
    booted.then(|| format!("booted with lockdown=confidentiality, {CMDLINE}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    // /proc/filesystems of Debian's 6.1 cloud kernel, abridged, and of one built without
    // tracing (benches/kernels/no-tracing.config).
    const WITH: &str = "nodev\tsysfs\nnodev\ttmpfs\nnodev\tproc\nnodev\ttracefs\n\text4\n";
    const WITHOUT: &str = "nodev\tsysfs\nnodev\ttmpfs\nnodev\tproc\nnodev\tsecurityfs\n";

    #[test]
    fn a_kernel_without_tracing_is_named_by_its_config_option() {
        let e = explain(&KernelSays {
            filesystems: Some(WITHOUT),
            ..KernelSays::default()
        })
        .unwrap();
        assert!(matches!(e, TracefsError::NotBuiltIn));
        let msg = e.to_string();
        assert!(msg.contains("CONFIG_FTRACE"), "{msg}");
        assert!(msg.contains("-e page-faults"), "{msg}");
    }

    #[test]
    fn confidentiality_lockdown_is_named_from_securityfs_or_the_command_line() {
        let e = explain(&KernelSays {
            lockdown: Some("none integrity [confidentiality]\n"),
            filesystems: Some(WITH),
            ..KernelSays::default()
        })
        .unwrap();
        let msg = e.to_string();
        assert!(msg.contains("locked down"), "{msg}");
        assert!(msg.contains("[confidentiality]"), "{msg}");
        let e = explain(&KernelSays {
            cmdline: Some("console=ttyS0 lockdown=confidentiality quiet\n"),
            filesystems: Some(WITH),
            ..KernelSays::default()
        })
        .unwrap();
        assert!(e.to_string().contains("lockdown=confidentiality"), "{e}");
    }

    #[test]
    fn integrity_lockdown_or_a_kernel_with_tracefs_explains_nothing() {
        // Integrity mode leaves tracefs alone; securityfs's answer wins over the command
        // line (lockdown can be raised after boot, never lowered).
        assert!(
            explain(&KernelSays {
                lockdown: Some("none [integrity] confidentiality\n"),
                cmdline: Some("lockdown=integrity"),
                filesystems: Some(WITH),
            })
            .is_none()
        );
        assert!(
            explain(&KernelSays {
                filesystems: Some(WITH),
                ..KernelSays::default()
            })
            .is_none()
        );
        // Nothing readable: nothing to say.
        assert!(explain(&KernelSays::default()).is_none());
    }
}
