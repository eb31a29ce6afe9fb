//! A system user made for one test, to run memperf unprivileged for real.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A system user made for one test, deleted however the test ends.
pub struct TestUser {
    name: String,
    /// A copy of the memperf binary the user can run.
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestUser {
    pub fn create() -> Option<TestUser> {
        let name = format!("mpt{}", std::process::id() % 100_000);
        let made = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", &name])
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.path().join("memperf");
        std::fs::copy(env!("CARGO_BIN_EXE_memperf"), &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        Some(TestUser {
            name,
            bin,
            _dir: dir,
        })
    }

    /// `sh -c SCRIPT` as the user (no supplementary groups), with `$MEMPERF` set.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("setpriv")
            .args([
                "--reuid",
                &self.name,
                "--regid",
                &self.name,
                "--clear-groups",
            ])
            .args(["env", &format!("MEMPERF={}", self.bin.display())])
            .args(["sh", "-c", script])
            .current_dir("/tmp")
            .output()
            .unwrap()
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .status();
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}
