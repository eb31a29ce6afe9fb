#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The build-id cache in a directory other users may change: root, keeping a binary there,
//! follows no symbolic link and enters no directory another user owns (it once created
//! `.build-id/NN/...` and renamed the binary through a user's link to a root-only place).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt, chown, lchown, symlink};
use std::path::Path;

use common::*;

const NOBODY: u32 = 65534;
/// A binary with a build-id on every distribution.
const BINARY: &str = "/bin/true";

fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

/// A root-only directory, the target of the links.
fn secret(root: &Path) -> std::path::PathBuf {
    let s = root.join("secret");
    std::fs::create_dir(&s).unwrap();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o700)).unwrap();
    s
}

fn refused(cache: &Path, secret: &Path, why: &str) {
    let e = memperf::buildid::keep_in_cache_at(cache, Path::new(BINARY))
        .expect_err("the cache is refused");
    let msg = e.to_string();
    assert!(
        msg.starts_with("refusing the build-id cache directory `"),
        "{msg}"
    );
    assert!(msg.contains(why), "{msg}");
    assert!(files_under(secret).is_empty(), "{:?}", files_under(secret));
}

#[test]
fn the_build_id_cache_follows_no_users_symlink_nor_enters_their_directories() {
    if !is_root() {
        eprintln!("skipping: the build-id cache's ownership checks need root");
        return;
    }
    let dir = scratch();
    let root = dir.path();
    let secret = secret(root);

    // A shared directory owned by nobody, whose `.build-id` is nobody's link to root's.
    let shared = root.join("shared");
    std::fs::create_dir(&shared).unwrap();
    symlink(&secret, shared.join(".build-id")).unwrap();
    lchown(shared.join(".build-id"), Some(NOBODY), Some(NOBODY)).unwrap();
    chown(&shared, Some(NOBODY), Some(NOBODY)).unwrap();
    refused(&shared, &secret, "belongs to user 65534");

    // The same link in root's own directory: no link is followed.
    let linked = root.join("linked");
    std::fs::create_dir(&linked).unwrap();
    symlink(&secret, linked.join(".build-id")).unwrap();
    refused(&linked, &secret, "is a symbolic link");

    // A link deeper down, under a `.build-id` of root's.
    let deep = root.join("deep");
    std::fs::create_dir_all(deep.join(".build-id")).unwrap();
    let id = memperf::buildid::file_build_id(Path::new(BINARY))
        .unwrap()
        .expect("a build-id");
    let nn = memperf::buildid::to_hex(&id[..1]);
    symlink(&secret, deep.join(".build-id").join(&nn)).unwrap();
    refused(&deep, &secret, "is a symbolic link");

    // A directory of nobody's on the way.
    let mixed = root.join("mixed");
    std::fs::create_dir_all(mixed.join(".build-id")).unwrap();
    chown(mixed.join(".build-id"), Some(NOBODY), Some(NOBODY)).unwrap();
    refused(&mixed, &secret, "belongs to user 65534");

    // Root's own cache takes the binary, 0600, where perf looks for it.
    let own = root.join("own");
    let kept = memperf::buildid::keep_in_cache_at(&own, Path::new(BINARY)).unwrap();
    assert_eq!(kept.as_deref(), Some(&id[..]));
    let path = memperf::buildid::cache_path(&own, &id).unwrap();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(meta.len(), std::fs::metadata(BINARY).unwrap().len());
    // Again: kept already.
    memperf::buildid::keep_in_cache_at(&own, Path::new(BINARY)).unwrap();
}
