//! Root and another user's store through the `ckptfs` command (issue 9, "Root trusts
//! files other users can plant"): a user who creates root's store name first gets root a
//! clear refusal naming the owner, and root attaches it only with --allow-foreign-owner.

use ckptfs_testsupport::{test_user, TEST_USER as USER};
use std::process::{Command, Output};

fn ckptfs(store: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ckptfs"));
    c.env_remove("CKPTFS_CONFIG")
        .env_remove("CKPTFS_ALLOW_FOREIGN_OWNER")
        .env("CKPTFS_STORE", store)
        .args(args);
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn store_name_taken_by_another_user_is_refused_naming_the_owner_unless_root_opts_in() {
    let Some(uid) = test_user() else { return };
    let name = format!("ho-cli-squat-{}", std::process::id());
    let seg = format!("/dev/shm/ckptfs.{name}");
    struct Rm(String);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _rm = Rm(seg.clone());
    // The user creates the store first, with the same command root would use.
    let o = Command::new("runuser")
        .args(["-u", USER, "--", env!("CARGO_BIN_EXE_ckptfs")])
        .args([
            "--store",
            &name,
            "init",
            "--mem-size",
            "1M",
            "--chunk-size",
            "64K",
        ])
        .env_remove("CKPTFS_CONFIG")
        .env("HOME", "/")
        .output()
        .unwrap();
    if !o.status.success() {
        ckptfs_testsupport::skip_root_only(format_args!(
            "{USER} cannot run the ckptfs binary here: {}",
            text(&o)
        ));
        return;
    }
    let o = ckptfs(&name, &["ls", "/"]).output().unwrap();
    assert!(!o.status.success(), "root attached a store owned by uid {uid}");
    let msg = text(&o);
    assert!(msg.contains(&seg), "{msg}");
    assert!(msg.contains(&format!("owned by uid {uid}")), "{msg}");
    let o = ckptfs(&name, &["init"]).output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    // Explicit opt-in, by flag or environment.
    let o = ckptfs(&name, &["--allow-foreign-owner", "ls", "/"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = ckptfs(&name, &["ls", "/"])
        .env("CKPTFS_ALLOW_FOREIGN_OWNER", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
}
