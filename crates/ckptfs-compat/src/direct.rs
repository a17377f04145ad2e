//! Routing files straight into the store when the preload shim is in the process.
//!
//! A routed file normally goes to a staging directory (tmpfs) and is copied into the
//! store when the checkpoint completes: a path reaches the store only through the
//! preload shim or a FUSE mount. When the program runs under the shim (`ckptfs run`, or
//! `LD_PRELOAD=libckptfs_preload.so`) and the shim serves the same store as the
//! library, the route can instead name the store file itself under the shim's mount
//! prefix (`/ckpt/scr/JOB/ID/rRANK/REL`): the application's `write`s land in the store
//! and completion copies nothing.
//!
//! The shim is found with `dlsym(RTLD_DEFAULT, "ckptfs_preload_settings")`, which
//! answers the settings it resolved (JSON, `ckptfs config --json`'s `resolved`); its
//! store name must equal the library's and its first mount prefix is used.

use std::ffi::c_char;

/// The shim's diagnostic entry point (`crates/ckptfs-preload/src/state.rs`).
type SettingsFn = unsafe extern "C" fn(*mut c_char, usize) -> isize;

/// The shim's first mount prefix when the shim is loaded in this process and serves
/// the store named `store` (any of `names`); None otherwise.
pub fn detect(names: &[&str]) -> Option<String> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks the symbol up.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ckptfs_preload_settings".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: the symbol is the shim's `ckptfs_preload_settings`, whose C signature is
    // `isize (char *buf, size_t len)` (SettingsFn).
    let f: SettingsFn = unsafe { std::mem::transmute::<*mut libc::c_void, SettingsFn>(sym) };
    let mut buf = vec![0u8; 8192];
    // SAFETY: buf is valid for writing buf.len() bytes; the shim writes at most that
    // many (NUL included) and attaches nothing.
    let n = unsafe { f(buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    if n <= 0 {
        return None;
    }
    buf.truncate(n as usize);
    let text = String::from_utf8(buf).ok()?;
    let (store, mount) = parse(&text)?;
    names.contains(&store.as_str()).then_some(mount)
}

/// `(store name, first mount prefix)` from the shim's settings JSON; None when a field
/// is missing or holds an escape (names and prefixes the store accepts need none).
pub fn parse(json: &str) -> Option<(String, String)> {
    let string_after = |key: &str| -> Option<String> {
        let i = json.find(key)? + key.len();
        let rest = &json[i..];
        let end = rest.find('"')?;
        let v = &rest[..end];
        (!v.contains('\\')).then(|| v.to_string())
    };
    let store = string_after("\"store\":\"")?;
    let mount = string_after("\"mount\":[\"")?;
    let mount = mount.trim_end_matches('/');
    if store.is_empty() || !mount.starts_with('/') {
        return None;
    }
    Some((store, mount.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_store_and_first_mount() {
        let j = r#"{"store":"hp3-a","mem_size":null,"chunk_size":null,"max_files":null,"shm_dir":null,"spill_dir":null,"spill_size":null,"private":false,"allow_foreign_owner":false,"mount":["/ckpt/","/other"]}"#;
        assert_eq!(parse(j), Some(("hp3-a".into(), "/ckpt".into())));
    }

    #[test]
    fn refuses_what_it_cannot_read_plainly() {
        assert_eq!(parse(r#"{"error":"CKPTFS_MEM_SIZE: bad"}"#), None);
        assert_eq!(parse(r#"{"store":"a\"b","mount":["/ckpt"]}"#), None);
        assert_eq!(parse(r#"{"store":"a","mount":[]}"#), None);
        assert_eq!(parse(r#"{"store":"","mount":["/ckpt"]}"#), None);
    }

    #[test]
    fn no_shim_in_a_test_process() {
        assert_eq!(detect(&["anything"]), None);
    }
}
