//! Root must not trust store files another user can plant (issue 9, "Root trusts files
//! other users can plant"): a segment created first by another user, a segment with
//! group/other permissions, a symbolic link where the spill file goes, and a forged
//! segment naming someone else's file as its spill file.
//!
//! The attacker's steps run as an unprivileged user the test creates with `useradd`
//! (`ckptfs-test1`) through `runuser`; those tests print SKIPPED and pass when not root
//! (they fail under `CKPTFS_REQUIRE_ROOT_TESTS=1`: `ckptfs_testsupport::skip_root_only`).

use ckptfs_store::checksum::crc32c;
use ckptfs_store::layout::Layout;
use ckptfs_store::{segment_path, Store, StoreError, StoreOptions};
use ckptfs_testsupport::{test_user, TEST_USER as USER};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Run `sh -c script` as the test user with `stdin` as its input.
fn as_user(script: &str, stdin: Stdio) {
    let st = Command::new("runuser")
        .args(["-u", USER, "--", "sh", "-c", script])
        .stdin(stdin)
        .status()
        .unwrap();
    assert!(st.success(), "as {USER}: {script}: {st}");
}

fn name(tag: &str) -> String {
    format!("ho-{tag}-{}", std::process::id())
}

/// Removes a segment (and any listed files) when dropped, whoever owns them.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn small(name: &str) -> StoreOptions {
    StoreOptions {
        name: name.into(),
        mem_size: Some(4 << 16),
        chunk_size: Some(1 << 16),
        max_files: Some(16),
        ..Default::default()
    }
}

/// The bytes of a valid segment created by the caller, with its layout's spill path set
/// to `spill` (checksum recomputed): what an attacker can forge.
fn forged_image(tag: &str, spill: Option<&Path>) -> Vec<u8> {
    let src = name(&format!("{tag}-src"));
    let _ = Store::destroy(&src);
    drop(Store::create(&small(&src)).unwrap());
    let mut img = std::fs::read(segment_path(&src)).unwrap();
    Store::destroy(&src).unwrap();
    if let Some(sp) = spill {
        use std::os::unix::ffi::OsStrExt;
        let off = 16 + std::mem::offset_of!(Layout, spill_path);
        let b = sp.as_os_str().as_bytes();
        img[off..off + 512].fill(0);
        img[off..off + b.len()].copy_from_slice(b);
        // The superblock says the segment has no spill chunks; the path is still used.
        let lsize = std::mem::size_of::<Layout>();
        // SAFETY: Layout is plain integers and bytes, valid for any bit pattern, and the
        // image holds a whole superblock.
        let l: Layout = unsafe { std::ptr::read_unaligned(img[16..16 + lsize].as_ptr() as *const Layout) };
        img[12..16].copy_from_slice(&crc32c(l.as_bytes()).to_le_bytes());
    }
    img
}

/// Plant `img` as store `name`'s segment, created by the test user with mode 0600.
fn plant_as_user(name: &str, img: &[u8]) -> PathBuf {
    let t = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(t.path(), img).unwrap();
    let seg = segment_path(name);
    as_user(
        &format!("umask 077 && cat > {}", seg.display()),
        Stdio::from(std::fs::File::open(t.path()).unwrap()),
    );
    seg
}

fn err(r: Result<Store, StoreError>) -> StoreError {
    match r {
        Ok(s) => panic!("store {} was attached", s.name()),
        Err(e) => e,
    }
}

fn assert_untrusted(e: StoreError, owner: u32, what: &str) {
    assert_eq!(e.errno(), libc::EACCES, "{e}");
    let msg = e.to_string();
    assert!(
        matches!(&e, StoreError::Untrusted { owner: o, .. } if *o == owner),
        "{msg}"
    );
    assert!(msg.contains(what), "{msg} should say {what}");
    assert!(msg.contains(&format!("owner uid {owner}")), "{msg}");
}

#[test]
fn store_name_precreated_by_another_user_is_refused_naming_the_owner() {
    let Some(uid) = test_user() else { return };
    let n = name("squat");
    let seg = plant_as_user(&n, &forged_image("squat", None));
    let _c = Cleanup(vec![seg.clone()]);
    assert_eq!(std::fs::metadata(&seg).unwrap().uid(), uid);
    let e = err(Store::attach(&small(&n)));
    assert_untrusted(e, uid, "not by the caller (uid 0)");
    assert_untrusted(err(Store::open_or_create(&small(&n))), uid, "owned by uid");
    assert!(Store::create(&small(&n)).is_err());
    // Root may opt in explicitly.
    let opts = StoreOptions {
        allow_foreign_owner: true,
        ..small(&n)
    };
    let s = Store::attach(&opts).unwrap();
    assert_eq!(s.name(), n);
}

#[test]
fn own_segment_with_mode_0644_is_refused() {
    let n = name("mode");
    let _ = Store::destroy(&n);
    drop(Store::create(&small(&n)).unwrap());
    let seg = segment_path(&n);
    let _c = Cleanup(vec![seg.clone()]);
    assert_eq!(std::fs::metadata(&seg).unwrap().mode() & 0o7777, 0o600);
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o644)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let e = err(Store::attach(&small(&n)));
    assert_untrusted(e, me, "mode 0644");
    // Even the explicit opt-in for foreign owners does not accept a readable segment.
    let opts = StoreOptions {
        allow_foreign_owner: true,
        ..small(&n)
    };
    assert!(matches!(Store::attach(&opts), Err(StoreError::Untrusted { .. })));
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o600)).unwrap();
    Store::attach(&small(&n)).unwrap();
}

#[test]
fn symlink_planted_at_the_segment_path_is_not_followed() {
    let n = name("seglink");
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let seg = segment_path(&n);
    let _ = std::fs::remove_file(&seg);
    std::os::unix::fs::symlink(&victim, &seg).unwrap();
    let _c = Cleanup(vec![seg.clone()]);
    let e = err(Store::open_or_create(&small(&n)));
    assert!(
        matches!(&e, StoreError::Untrusted { reason, .. } if reason.contains("symbolic link")),
        "{e}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn planted_symlink_at_the_spill_path_is_not_followed() {
    let n = name("spilllink");
    let _ = Store::destroy(&n);
    let t = tempfile::tempdir().unwrap();
    let spill_dir = t.path().join("spill");
    std::fs::create_dir(&spill_dir).unwrap();
    let opts = StoreOptions {
        spill_dir: Some(spill_dir.clone()),
        spill_size: Some(2 << 16),
        ..small(&n)
    };
    drop(Store::create(&opts).unwrap());
    let _c = Cleanup(vec![segment_path(&n)]);
    let spill = spill_dir
        .canonicalize()
        .unwrap()
        .join(format!("ckptfs.{n}.spill"));
    assert_eq!(std::fs::metadata(&spill).unwrap().mode() & 0o7777, 0o600);
    // The spill file is replaced by a link to a file the caller may write.
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_file(&spill).unwrap();
    std::os::unix::fs::symlink(&victim, &spill).unwrap();
    let e = err(Store::attach(&StoreOptions::named(&n)));
    assert!(
        matches!(&e, StoreError::Untrusted { reason, .. } if reason.contains("symbolic link")),
        "{e}"
    );
    // destroy removes the segment, and the link is not followed to its target.
    Store::destroy(&n).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn forged_segment_cannot_make_root_write_through_or_delete_another_file_as_spill() {
    let Some(uid) = test_user() else { return };
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("root-only");
    std::fs::write(&victim, b"root secret").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A user-owned segment naming root's file as spill: refused on attach (wrong owner),
    // and destroy removes the segment but not the file.
    let n = name("forged");
    let seg = plant_as_user(&n, &forged_image("forged", Some(&victim)));
    let _c = Cleanup(vec![seg.clone()]);
    assert_untrusted(err(Store::attach(&small(&n))), uid, "owned by uid");
    // With the explicit opt-in, the spill path still must be the store's own name.
    let opts = StoreOptions {
        allow_foreign_owner: true,
        ..small(&n)
    };
    let e = err(Store::attach(&opts));
    assert!(
        matches!(&e, StoreError::Untrusted { reason, .. } if reason.contains("not the spill file")),
        "{e}"
    );
    Store::destroy(&n).unwrap();
    assert!(!seg.exists());
    assert_eq!(std::fs::read(&victim).unwrap(), b"root secret");
}

#[test]
fn destroy_of_own_forged_segment_leaves_the_named_spill_file_in_place() {
    // Even a segment the caller owns (damaged, or forged by a process of the same user)
    // must not delete a file that is not the store's own spill file.
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("important");
    std::fs::write(&victim, b"keep").unwrap();
    let n = name("ownforged");
    let seg = segment_path(&n);
    let _c = Cleanup(vec![seg.clone()]);
    std::fs::write(&seg, forged_image("ownforged", Some(&victim))).unwrap();
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o600)).unwrap();
    Store::destroy(&n).unwrap();
    assert!(!seg.exists());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // The right name, but a link: the link may go, its target stays.
    let named = t.path().join(format!("ckptfs.{n}.spill"));
    std::os::unix::fs::symlink(&victim, &named).unwrap();
    std::fs::write(&seg, forged_image("ownforged2", Some(&named))).unwrap();
    std::fs::set_permissions(&seg, std::fs::Permissions::from_mode(0o600)).unwrap();
    Store::destroy(&n).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
}

#[test]
fn unprivileged_user_cannot_attach_roots_store() {
    let Some(_uid) = test_user() else { return };
    let n = name("rootstore");
    let _ = Store::destroy(&n);
    drop(Store::create(&small(&n)).unwrap());
    let seg = segment_path(&n);
    let _c = Cleanup(vec![seg.clone()]);
    // The user can neither read nor replace root's 0600 segment in the sticky /dev/shm.
    let st = Command::new("runuser")
        .args(["-u", USER, "--", "sh", "-c"])
        .arg(format!(
            "cat {0} >/dev/null 2>&1 || rm -f {0} 2>/dev/null; test -e {0}",
            seg.display()
        ))
        .status()
        .unwrap();
    assert!(st.success(), "root's segment must survive the user's attempts");
    assert_eq!(std::fs::metadata(&seg).unwrap().uid(), 0);
    Store::attach(&small(&n)).unwrap();
}
