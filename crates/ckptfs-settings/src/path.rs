//! Lexical path normalisation, shared by the shim, the C API and the CLI.

/// The components of a path with `.` and `..` resolved lexically (`..` at the root
/// stays at the root) and empty components dropped. A relative path is taken from `/`.
pub fn components(p: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts
}

/// As [`components`], but a component longer than `name_max` bytes (even one that a
/// later `..` removes) is an error carrying it.
pub fn components_checked(p: &str, name_max: usize) -> Result<Vec<&str>, &str> {
    match p.split('/').find(|c| c.len() > name_max) {
        Some(c) => Err(c),
        None => Ok(components(p)),
    }
}

/// Lexically normalise an absolute path: no `.`, no empty components, `..` removes the
/// previous component (and stays at `/` at the root). Always starts with `/`, never ends
/// with one (except `/` itself). A relative path is treated as if it started with `/`.
pub fn normalize(p: &str) -> String {
    let mut s = String::with_capacity(p.len() + 1);
    for c in components(p) {
        s.push('/');
        s.push_str(c);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

/// As [`normalize`], but a component longer than `name_max` bytes (even one that a later
/// `..` removes) is an error carrying its length.
pub fn normalize_checked(p: &str, name_max: usize) -> Result<String, usize> {
    match components_checked(p, name_max) {
        Err(c) => Err(c.len()),
        Ok(_) => Ok(normalize(p)),
    }
}

/// Join a base directory and a relative path, then normalise.
pub fn join(base: &str, rel: &str) -> String {
    let mut s = String::with_capacity(base.len() + rel.len() + 1);
    s.push_str(base);
    s.push('/');
    s.push_str(rel);
    normalize(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_dots_and_slashes() {
        assert_eq!(normalize("/a/./b//c/../d/"), "/a/b/d");
        assert_eq!(normalize("/../.."), "/");
        assert_eq!(normalize("/ckpt/.."), "/");
        assert_eq!(normalize(""), "/");
        assert_eq!(normalize("/.hidden/..x"), "/.hidden/..x");
    }

    #[test]
    fn checked_normalize_rejects_long_components_even_when_removed() {
        assert_eq!(components_checked("a/./bb/../c", 2), Ok(vec!["a", "c"]));
        assert_eq!(components_checked("/x/ccc/..", 2), Err("ccc"));
        assert_eq!(normalize_checked("/a/bbb/../c", 3), Ok("/a/c".into()));
        assert_eq!(normalize_checked("/a/bbbb/../c", 3), Err(4));
    }

    #[test]
    fn join_normalises() {
        assert_eq!(join("/ckpt/a", "../b/./c"), "/ckpt/b/c");
        assert_eq!(join("/", "ckpt/x"), "/ckpt/x");
    }
}
