//! The `[levels]` section: the levels a restore or a restart reads, in read order, and
//! each level's options.
//!
//! ```toml
//! [levels]
//! order = ["local", "partner", "s3:ckptfs/run1", "pfs"]
//!
//! [levels."s3:ckptfs/run1"]
//! endpoint = "http://127.0.0.1:9000"
//! compress = "zstd"
//! ```
//!
//! `order` is also the `CKPTFS_LEVELS` variable and the `--levels` flag (comma-separated
//! ids); the per-level tables come from the file only. The default, `local,partner,pfs`,
//! is what every restore read before the section existed: the node store, the partners'
//! memory (in a cluster), the drain destinations (`--dest`, `CKPTFS_DEST`).
//!
//! Three kinds are read by the front-ends' own paths (the *built-in* steps): `local` (the
//! node store, always first), `partner` (the cluster map's partners; second when
//! listed) and `pfs` without an instance (the drain destinations, with their node
//! manifests). Every other entry (`pfs:/DIR`, `s3:BUCKET/PREFIX`, `dir:/DIR`,
//! `pool:MANAGER`, a new level's kind) is opened by its kind's factory into the level
//! registry (`ckptfs_level::open_levels`) and read through it. The built-in steps and
//! the registry's levels may interleave after `partner`.
//!
//! Checked here, each error naming the entry: the id's form (`kind` or `kind:instance`,
//! kind `[a-z0-9_-]+`), no duplicate, `local` present and first, `partner` right after
//! it, no instance on `local`/`partner`, an absolute directory for `pfs:` and `dir:`, a
//! valid bucket for `s3:`, option tables only for listed ids, and no credential among the
//! options (keys come from the `AWS_*` variables or `~/.aws/credentials`, never from a
//! settings file that `ckptfs config --json` prints). A kind no factory opens is refused
//! when the registry is built.

use std::collections::BTreeMap;

/// The default order: what every restore read before the section existed.
pub const DEFAULT_LEVELS: &str = "local,partner,pfs";

/// The kinds the front-ends read by their own paths (see the module documentation).
pub const BUILTIN: [&str; 3] = ["local", "partner", "pfs"];

/// The kinds a drain can write to: `ckptfs agent` without `--dest` (and without
/// `CKPTFS_DEST`) drains to the first entry of one of these kinds that names its
/// instance ([`LevelsSettings::drain_target`]).
pub const PERSISTENT: [&str; 2] = ["pfs", "s3"];

/// One entry of `levels.order`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelEntry {
    /// The kind (`local`, `s3`, ...).
    pub kind: String,
    /// The instance (`bucket/prefix`, `/dir`); empty for none.
    pub instance: String,
    /// Its options from the file's `[levels."ID"]` table.
    pub options: BTreeMap<String, String>,
}

impl LevelEntry {
    /// `kind` or `kind:instance`.
    pub fn id(&self) -> String {
        if self.instance.is_empty() {
            self.kind.clone()
        } else {
            format!("{}:{}", self.kind, self.instance)
        }
    }

    /// Read by a front-end's own path (`local`, `partner`, `pfs` without an instance),
    /// not opened into the registry.
    pub fn builtin(&self) -> bool {
        self.instance.is_empty() && BUILTIN.contains(&self.kind.as_str())
    }
}

/// The resolved `[levels]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelsSettings {
    /// The levels in read order (`local` first).
    pub order: Vec<LevelEntry>,
}

impl Default for LevelsSettings {
    fn default() -> Self {
        LevelsSettings {
            order: BUILTIN
                .iter()
                .map(|k| LevelEntry {
                    kind: k.to_string(),
                    instance: String::new(),
                    options: BTreeMap::new(),
                })
                .collect(),
        }
    }
}

impl LevelsSettings {
    /// Whether the built-in step `kind` (`partner`, `pfs`) is listed.
    pub fn reads(&self, kind: &str) -> bool {
        self.order.iter().any(|e| e.builtin() && e.kind == kind)
    }

    /// The drain's target when no destination is given: the first persistent level
    /// listed with its instance (`pfs:/DIR` or `s3:BUCKET/PREFIX`, [`PERSISTENT`]).
    /// `pfs` without a directory is the drain destination itself, so it names none.
    pub fn drain_target(&self) -> Option<&LevelEntry> {
        self.order
            .iter()
            .find(|e| !e.instance.is_empty() && PERSISTENT.contains(&e.kind.as_str()))
    }

    /// The entries opened into the registry (not built-in), in read order.
    pub fn registry_entries(&self) -> impl Iterator<Item = &LevelEntry> {
        self.order.iter().filter(|e| !e.builtin())
    }

    /// As JSON: `[{"id": ..., "options": {...}}, ...]` (`ckptfs config --json`; the
    /// options hold no credential, see the module documentation).
    pub fn to_json(&self) -> String {
        let items: Vec<String> = self
            .order
            .iter()
            .map(|e| {
                let opts: Vec<String> = e
                    .options
                    .iter()
                    .map(|(k, v)| format!("{}:{}", crate::json_str(k), crate::json_str(v)))
                    .collect();
                format!(
                    "{{\"id\":{},\"options\":{{{}}}}}",
                    crate::json_str(&e.id()),
                    opts.join(",")
                )
            })
            .collect();
        format!("[{}]", items.join(","))
    }
}

fn kind_ok(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// S3's bucket rule: 3 to 63 of `a-z 0-9 . -`, starting and ending with a letter or digit.
fn bucket_ok(b: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (3..=63).contains(&b.len())
        && b.bytes().all(|c| alnum(c) || c == b'.' || c == b'-')
        && b.bytes().next().is_some_and(alnum)
        && b.bytes().last().is_some_and(alnum)
}

/// Parse `levels.order` (comma-separated ids) and check it; the error names the entry.
pub fn parse_order(v: &str) -> Result<Vec<LevelEntry>, String> {
    let mut out: Vec<LevelEntry> = Vec::new();
    for (i, raw) in v.split(',').enumerate() {
        let s = raw.trim();
        let at = |m: String| format!("entry {} {s:?}: {m}", i + 1);
        if s.is_empty() {
            return Err(format!("entry {} is empty (ids are separated by commas)", i + 1));
        }
        let (kind, instance) = s.split_once(':').unwrap_or((s, ""));
        if !kind_ok(kind) {
            return Err(at(format!(
                "the kind {kind:?} is not a level kind (lower-case letters, digits, _ and -)"
            )));
        }
        if s.contains(':') && instance.is_empty() {
            return Err(at("empty instance after the colon".into()));
        }
        if instance.chars().any(char::is_control) {
            return Err(at("control characters in the instance".into()));
        }
        match kind {
            "local" | "partner" if !instance.is_empty() => {
                return Err(at(format!(
                    "{kind} takes no instance ({})",
                    if kind == "local" {
                        "the node store is the store setting"
                    } else {
                        "the cluster map chooses this node's partners"
                    }
                )))
            }
            "pfs" | "dir" if !instance.is_empty() && !instance.starts_with('/') => {
                return Err(at(format!("{kind}: needs an absolute directory ({kind}:/DIR)")))
            }
            "dir" if instance.is_empty() => return Err(at("dir: needs a directory (dir:/DIR)".into())),
            "s3" => {
                let bucket = instance.split('/').next().unwrap_or("");
                if !bucket_ok(bucket) {
                    return Err(at(format!(
                        "{bucket:?} is not a bucket name (s3:BUCKET/PREFIX; 3 to 63 of a-z 0-9 . -)"
                    )));
                }
            }
            _ => {}
        }
        let e = LevelEntry {
            kind: kind.to_string(),
            instance: instance.to_string(),
            options: BTreeMap::new(),
        };
        if out.iter().any(|o| o.id() == e.id()) {
            return Err(at("listed twice".into()));
        }
        if kind == "local" && i != 0 {
            return Err(at("the node store is read first: put local first".into()));
        }
        if kind == "partner" && e.builtin() && i != 1 {
            return Err(at(
                "partners are read right after the node store: put partner second".into(),
            ));
        }
        out.push(e);
    }
    if out.first().is_none_or(|e| e.kind != "local") {
        return Err("the first entry must be local (the node store is always read first)".into());
    }
    Ok(out)
}

/// Option keys that would hold a credential: refused (the value is never echoed).
fn credential(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "secret",
        "password",
        "token",
        "credential",
        "access_key",
        "key_id",
    ]
    .iter()
    .any(|w| k.contains(w))
}

/// Attach the file's option tables to the entries of `order`. Err: `(id, problem)`.
pub(crate) fn with_options(
    mut order: Vec<LevelEntry>,
    tables: Vec<(String, BTreeMap<String, String>)>,
) -> Result<LevelsSettings, (String, String)> {
    for (id, opts) in tables {
        let Some(e) = order.iter_mut().find(|e| e.id() == id) else {
            let listed: Vec<String> = order.iter().map(LevelEntry::id).collect();
            return Err((
                id,
                format!("options for a level not in levels.order ({})", listed.join(", ")),
            ));
        };
        if e.builtin() {
            return Err((id, "a built-in level takes no options".into()));
        }
        if let Some(k) = opts.keys().find(|k| credential(k)) {
            return Err((
                id,
                format!(
                    "option {k:?} would hold a credential: keys come from the AWS_* variables or ~/.aws/credentials, never from the settings file"
                ),
            ));
        }
        e.options = opts;
    }
    Ok(LevelsSettings { order })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_target_is_the_first_persistent_level_with_an_instance() {
        let of = |v: &str| {
            LevelsSettings {
                order: parse_order(v).unwrap(),
            }
            .drain_target()
            .map(LevelEntry::id)
        };
        assert_eq!(of("local,partner,pfs"), None);
        assert_eq!(of("local,dir:/x,pool:m1"), None);
        assert_eq!(
            of("local,partner,s3:ckptfs/run1,pfs"),
            Some("s3:ckptfs/run1".into())
        );
        assert_eq!(
            of("local,pfs,pfs:/scratch/r,s3:b12/p"),
            Some("pfs:/scratch/r".into())
        );
        assert_eq!(
            of("local,dir:/x,s3:b12/p,pfs:/scratch/r"),
            Some("s3:b12/p".into())
        );
    }

    #[test]
    fn the_default_is_todays_order() {
        let d = LevelsSettings::default();
        assert_eq!(parse_order(DEFAULT_LEVELS).unwrap(), d.order);
        assert!(d.reads("partner") && d.reads("pfs"));
        assert_eq!(d.registry_entries().count(), 0);
    }

    #[test]
    fn entries_parse_in_order_and_split_builtin_from_registry() {
        let o =
            parse_order(" local , partner,s3:lv3-b/run1/x ,pfs, pfs:/scratch/a,dir:/d,pool:mgr1").unwrap();
        let ids: Vec<String> = o.iter().map(LevelEntry::id).collect();
        assert_eq!(
            ids,
            [
                "local",
                "partner",
                "s3:lv3-b/run1/x",
                "pfs",
                "pfs:/scratch/a",
                "dir:/d",
                "pool:mgr1"
            ]
        );
        let s = LevelsSettings { order: o };
        let reg: Vec<String> = s.registry_entries().map(LevelEntry::id).collect();
        assert_eq!(reg, ["s3:lv3-b/run1/x", "pfs:/scratch/a", "dir:/d", "pool:mgr1"]);
        assert!(s.reads("pfs") && s.reads("partner"));
        let s = LevelsSettings {
            order: parse_order("local,s3:bkt").unwrap(),
        };
        assert!(!s.reads("pfs") && !s.reads("partner"));
    }

    #[test]
    fn bad_entries_are_named() {
        for (v, entry, words) in [
            ("local,,pfs", "entry 2", "empty"),
            ("local,S3:b/p", "\"S3:b/p\"", "not a level kind"),
            ("local,s3:", "\"s3:\"", "empty instance"),
            ("local,s3:B_ad/p", "\"s3:B_ad/p\"", "not a bucket name"),
            ("local,s3:ab", "\"s3:ab\"", "not a bucket name"),
            ("local,pfs:rel/dir", "\"pfs:rel/dir\"", "absolute"),
            ("local,dir", "\"dir\"", "needs a directory"),
            ("local,local", "entry 2 \"local\"", "twice"),
            ("local,s3:bkt/a,s3:bkt/a", "entry 3", "twice"),
            ("local:x", "\"local:x\"", "no instance"),
            ("local,partner:n3", "\"partner:n3\"", "partners"),
            ("pfs,local", "entry 2 \"local\"", "first"),
            ("pfs", "first entry", "local"),
            ("local,pfs,partner", "entry 3 \"partner\"", "second"),
        ] {
            let e = parse_order(v).unwrap_err();
            assert!(e.contains(entry) && e.contains(words), "{v}: {e}");
        }
    }

    #[test]
    fn options_attach_to_listed_registry_levels_and_credentials_are_refused() {
        let o = parse_order("local,s3:bkt/run1,pfs").unwrap();
        let mut opts = BTreeMap::new();
        opts.insert("endpoint".to_string(), "http://127.0.0.1:9".to_string());
        let s = with_options(o.clone(), vec![("s3:bkt/run1".into(), opts.clone())]).unwrap();
        assert_eq!(s.order[1].options, opts);
        assert!(s
            .to_json()
            .contains(r#"{"id":"s3:bkt/run1","options":{"endpoint":"http://127.0.0.1:9"}}"#));
        let (id, e) = with_options(o.clone(), vec![("s3:other/x".into(), opts.clone())]).unwrap_err();
        assert!(id == "s3:other/x" && e.contains("not in levels.order"), "{e}");
        let (_, e) = with_options(o.clone(), vec![("pfs".into(), opts.clone())]).unwrap_err();
        assert!(e.contains("built-in"), "{e}");
        for k in [
            "secret_access_key",
            "aws_access_key_id",
            "session_token",
            "Password",
        ] {
            let mut bad = opts.clone();
            bad.insert(k.to_string(), "hunter2-SECRET".to_string());
            let (_, e) = with_options(o.clone(), vec![("s3:bkt/run1".into(), bad)]).unwrap_err();
            assert!(e.contains("credential") && !e.contains("hunter2"), "{k}: {e}");
        }
    }
}
