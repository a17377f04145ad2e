//! Which paths belong to the store: the mount prefixes from `CKPTFS_MOUNT`, lexical
//! normalisation (`.`, `..`, repeated slashes) and translation of `/ckpt/a/b` to the store
//! path `/a/b`. Pure functions, unit-tested without the shim loaded.

pub use ckptfs_settings::path::{join, normalize};

/// The mount prefixes of a `CKPTFS_MOUNT` that did not resolve (see `state::mounts`):
/// its absolute prefixes other than `/`, normalised, the invalid ones skipped; `/ckpt`
/// if none is left. A valid value gives what `ckptfs_settings::parse_prefixes` gives.
pub fn parse_mounts(v: Option<&str>) -> Vec<String> {
    let valid: Vec<&str> = v
        .unwrap_or("")
        .split(':')
        .filter(|s| s.starts_with('/') && normalize(s) != "/")
        .collect();
    ckptfs_settings::parse_prefixes(&valid.join(":")).unwrap_or_else(|_| vec!["/ckpt".to_string()])
}

/// Does this absolute path need normalising before a prefix comparison?
#[inline]
pub fn needs_normalize(p: &[u8]) -> bool {
    // "//", a "." or ".." component, or a trailing "/" (hidden names like ".x" are fine).
    let n = p.len();
    let dot_component = |i: usize| {
        // p[i] == b'.' right after a slash: "." or ".." up to the next slash or the end.
        let end = |k: usize| k == n || p[k] == b'/';
        end(i + 1) || p.get(i + 1) == Some(&b'.') && end(i + 2)
    };
    let mut i = 0;
    while i + 1 < n {
        if p[i] == b'/' && (p[i + 1] == b'/' || p[i + 1] == b'.' && dot_component(i + 1)) {
            return true;
        }
        i += 1;
    }
    n > 1 && p[n - 1] == b'/'
}

/// If the normalised absolute path `p` is under a mount, (mount index, store path).
pub fn match_mount(mounts: &[String], p: &str) -> Option<(usize, String)> {
    for (i, m) in mounts.iter().enumerate() {
        if p == m {
            return Some((i, "/".to_string()));
        }
        if p.len() > m.len() && p.starts_with(m.as_str()) && p.as_bytes()[m.len()] == b'/' {
            return Some((i, p[m.len()..].to_string()));
        }
    }
    None
}

/// Quick test on raw absolute path bytes that are already normal: could it be under a mount?
#[inline]
pub fn quick_prefix(mounts: &[String], p: &[u8]) -> bool {
    mounts.iter().any(|m| {
        let m = m.as_bytes();
        p.len() >= m.len() && &p[..m.len()] == m && (p.len() == m.len() || p[m.len()] == b'/')
    })
}

/// The full (virtual) path of a store path under mount `m`.
pub fn full_path(mount: &str, store_path: &str) -> String {
    if store_path == "/" {
        mount.to_string()
    } else {
        format!("{mount}{store_path}")
    }
}

/// Can a non-null string pointer a program passed be read without faulting, as far as an
/// address alone tells? Null is the caller's business (many calls accept it). The first
/// page (below `vm.mmap_min_addr`, never mapped) and the upper half of the address space
/// (the kernel's: pjdfstest passes `usize::MAX`) are refused, so that the shim answers
/// EFAULT like the kernel instead of crashing the program while reading the path. An
/// unmapped address inside the user half still faults, as it does in libc's own string
/// functions: telling those apart would cost a system call on every path call.
#[inline]
pub fn plausible_user_ptr(p: usize) -> bool {
    const FIRST_PAGE: usize = 4096;
    const KERNEL_HALF: usize = 1 << (usize::BITS - 1);
    // A string starting below the top of the user half cannot run into the kernel's
    // half without first crossing the unmapped guard gap at the top of user space.
    (FIRST_PAGE..KERNEL_HALF).contains(&p)
}

/// A path argument the kernel would answer EFAULT for without looking further: null or
/// not a plausible user address. For the calls taking two names, where one of them
/// leading into the store would otherwise decide the answer (EXDEV, EPERM).
#[inline]
pub fn unreadable(p: *const std::ffi::c_char) -> bool {
    p.is_null() || !plausible_user_ptr(p as usize)
}

/// The last component of a path as the program wrote it (trailing slashes ignored):
/// `rmdir("d/.")` is EINVAL and `rename("d/..", x)` EBUSY on Linux, though the
/// normalised path names a directory.
pub fn last_component(p: &[u8]) -> &[u8] {
    let mut end = p.len();
    while end > 1 && p[end - 1] == b'/' {
        end -= 1;
    }
    let start = p[..end].iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1);
    &p[start..end]
}

/// `PATH_MAX` with its NUL: a longer path argument is ENAMETOOLONG before any lookup.
pub const PATH_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_dots() {
        assert_eq!(normalize("/a/./b//c/../d/"), "/a/b/d");
        assert_eq!(normalize("/../.."), "/");
        assert_eq!(normalize("/ckpt/.."), "/");
    }

    #[test]
    fn mounts_match_on_component_boundaries() {
        let m = parse_mounts(Some("/ckpt:/scratch/ck/"));
        assert_eq!(m, vec!["/ckpt", "/scratch/ck"]);
        assert_eq!(match_mount(&m, "/ckpt"), Some((0, "/".into())));
        assert_eq!(match_mount(&m, "/ckpt/a/b"), Some((0, "/a/b".into())));
        assert_eq!(match_mount(&m, "/ckptx/a"), None);
        assert_eq!(match_mount(&m, "/scratch/ck/x"), Some((1, "/x".into())));
        assert!(quick_prefix(&m, b"/ckpt/x"));
        assert!(!quick_prefix(&m, b"/ckptx"));
        assert_eq!(parse_mounts(None), vec!["/ckpt"]);
    }

    #[test]
    fn invalid_mount_variable_keeps_its_absolute_prefixes() {
        assert_eq!(parse_mounts(Some("rel:/a/:/")), vec!["/a"]);
        assert_eq!(parse_mounts(Some("rel")), vec!["/ckpt"]);
        assert_eq!(parse_mounts(Some("/x/..:/b//c")), vec!["/b/c"]);
    }

    #[test]
    fn relative_paths_join_the_cwd() {
        assert_eq!(join("/ckpt/a", "../b/./c"), "/ckpt/b/c");
        assert_eq!(join("/", "ckpt/x"), "/ckpt/x");
        assert!(needs_normalize(b"/tmp/../ckpt/x"));
        assert!(needs_normalize(b"/ckpt//x"));
        assert!(!needs_normalize(b"/ckpt/x.y"));
        assert!(!needs_normalize(b"/tmp/.hidden/..x"));
        assert!(needs_normalize(b"/ckpt/a/.."));
        assert!(needs_normalize(b"/ckpt/./a"));
    }

    #[test]
    fn kernel_half_and_first_page_are_not_user_pointers() {
        assert!(!plausible_user_ptr(usize::MAX));
        assert!(!plausible_user_ptr(1 << 63));
        assert!(!plausible_user_ptr(16));
        let s = b"x\0";
        assert!(plausible_user_ptr(s.as_ptr() as usize));
    }

    #[test]
    fn last_component_ignores_trailing_slashes() {
        assert_eq!(last_component(b"/ckpt/d/."), b".");
        assert_eq!(last_component(b"d/..//"), b"..");
        assert_eq!(last_component(b"x"), b"x");
        assert_eq!(last_component(b"/"), b"");
    }
}
