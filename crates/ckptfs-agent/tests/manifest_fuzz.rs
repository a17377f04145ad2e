//! The manifest parser and entry checks against hostile input: a corpus of hostile
//! manifests (tests/corpus/manifest/, each file named after the error variant it must
//! give; `Ok-` accepted, `Empty-` accepted with no files) replayed through the parser
//! and through a real restore, and proptest fuzzing with arbitrary bytes, mutated valid
//! manifests and arbitrary field values. Nothing may panic; every refusal is a typed
//! error; whatever the checks accept is safe to use.

mod common;
use ckptfs_agent::manifest::{self, check_entry, parse, Entry, Manifest};
use ckptfs_agent::restore;
use common::*;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/manifest");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p: PathBuf = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(v.len() >= 30, "corpus missing: {}", dir.display());
    v
}

/// What the checks accept must be safe to use: one file name, the store path of this
/// directory, a legal chunk size, as many chunk CRCs as the size needs.
fn assert_safe(rel: &str, name: &str, e: &Entry) {
    assert!(!name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']));
    assert_eq!(e.store_path, manifest::store_path_of(rel, name));
    assert!(e.chunk_size.is_power_of_two());
    assert!((ckptfs_store::layout::MIN_CHUNK..=ckptfs_store::layout::MAX_CHUNK).contains(&e.chunk_size));
    assert_eq!(e.chunk_crc32c.len() as u64, e.size.div_ceil(e.chunk_size));
    assert!(e.mode <= 0o7777);
}

/// Parse and check everything; returns the errors as text (for the no-content check).
fn check_all(bytes: &[u8]) -> Vec<String> {
    match parse(bytes) {
        Err(e) => vec![e.to_string()],
        Ok(m) => {
            let mut out = Vec::new();
            for (name, e) in &m.files {
                match check_entry("x", name, e) {
                    Ok(()) => assert_safe("x", name, e),
                    Err(err) => out.push(err.to_string()),
                }
            }
            out
        }
    }
}

#[test]
fn corpus_of_hostile_manifests_gives_the_named_typed_error() {
    for (name, bytes) in corpus() {
        let want = name.split('-').next().unwrap();
        let got: Vec<String> = match parse(&bytes) {
            Err(e) => vec![format!("{e:?}")],
            Ok(m) => m
                .files
                .iter()
                .filter_map(|(k, e)| check_entry("x", k, e).err().map(|e| format!("{e:?}")))
                .collect(),
        };
        if want == "Empty" {
            // Harmless: parses, lists nothing (deep nesting in an ignored field must not
            // overflow the stack).
            assert!(parse(&bytes).unwrap().files.is_empty(), "{name}");
        } else if want == "Ok" {
            assert!(got.is_empty(), "{name}: {got:?}");
        } else {
            assert!(!got.is_empty(), "{name}: accepted");
            for g in &got {
                assert!(g.starts_with(want), "{name}: expected {want}, got {g}");
            }
        }
        for msg in check_all(&bytes) {
            assert!(
                !msg.contains("TOPSECRET"),
                "{name}: message quotes the file: {msg}"
            );
        }
    }
}

#[test]
fn corpus_replayed_through_restore_restores_only_the_valid_manifest() {
    let ts = store("corpus", |_| {});
    for (name, bytes) in corpus() {
        let dest = tempfile::tempdir().unwrap();
        let x = dest.path().join("x");
        std::fs::create_dir(&x).unwrap();
        std::fs::write(x.join(manifest::file_name("n0")), &bytes).unwrap();
        // The data files the corpus entries describe (zeros), present and readable.
        std::fs::write(x.join("a"), vec![0u8; 100]).unwrap();
        std::fs::write(x.join("b"), vec![0u8; 2 * (64 << 10) + 1]).unwrap();
        let targets = ckptfs_agent::config::targets(&[dest.path().to_path_buf()], &[]);
        let rep = restore(&ts.store, &targets, "/").unwrap();
        if name.starts_with("Empty-") {
            assert!(
                rep.restored.is_empty() && rep.failed.is_empty(),
                "{name}: {rep:?}"
            );
        } else if name.starts_with("Ok-") {
            assert_eq!((rep.restored.len(), rep.failed.len()), (2, 0), "{name}: {rep:?}");
            assert_eq!(get(&ts.store, "/x/b"), vec![0u8; 2 * (64 << 10) + 1]);
        } else {
            assert!(rep.restored.is_empty(), "{name}: {rep:?}");
            assert!(!rep.failed.is_empty(), "{name}: not reported");
            for f in &rep.failed {
                assert!(!f.error.contains("TOPSECRET"), "{name}: {}", f.error);
            }
        }
        for p in ["/x/a", "/x/b"] {
            let _ = ts.store.unlink(p);
        }
    }
}

fn valid_manifest() -> Manifest {
    let mut m = Manifest::new("n0", "u0");
    for (name, size) in [("a", 100u64), ("b", 3 * 65536 + 7), ("c", 0)] {
        let data = vec![7u8; size as usize];
        let chunks: Vec<u32> = data.chunks(65536).map(ckptfs_store::checksum::crc32c).collect();
        m.files.insert(
            name.into(),
            Entry {
                store_path: format!("/x/{name}"),
                size,
                crc32c: ckptfs_store::checksum::crc32c(&data),
                chunk_size: 65536,
                chunk_crc32c: chunks,
                mode: 0o640,
                mtime_ns: 1,
                drained_ns: 2,
            },
        );
    }
    m
}

#[test]
fn the_drains_own_manifest_passes_every_check() {
    let m = valid_manifest();
    let text = serde_json::to_vec_pretty(&m).unwrap();
    let back = parse(&text).unwrap();
    for (k, e) in &back.files {
        check_entry("x", k, e).unwrap();
    }
    // The same manifest in another directory: every entry is refused.
    for (k, e) in &back.files {
        assert!(check_entry("y", k, e).is_err());
    }
}

/// Hostile fragments spliced into valid manifests.
const SNIPPETS: &[&str] = &[
    "\"../../etc/shadow\"",
    "\"/etc/shadow\"",
    "18446744073709551615",
    "-1",
    "1e308",
    "0",
    "null",
    "{}",
    "[",
    "\"\\u0000\"",
    "9999999999999999999999",
    "\"a/b\"",
    "\"..\"",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = check_all(&bytes);
    }

    #[test]
    fn mutated_valid_manifests_never_panic_and_accept_only_safe_entries(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>(), any::<prop::sample::Index>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut text = serde_json::to_vec_pretty(&valid_manifest()).unwrap();
        for (at, op, byte, which) in edits {
            let i = at.index(text.len());
            match op {
                0 => text[i] ^= byte | 1,
                1 => { text.remove(i); }
                2 => text.insert(i, byte),
                _ => {
                    let s = SNIPPETS[which.index(SNIPPETS.len())].as_bytes();
                    // Replace the token at i (up to the next , or newline) by the snippet.
                    let end = text[i..].iter().position(|b| *b == b',' || *b == b'\n').map_or(text.len(), |p| i + p);
                    text.splice(i..end, s.iter().copied());
                }
            }
        }
        if truncate {
            let n = cut.index(text.len() + 1);
            text.truncate(n);
        }
        let _ = check_all(&text);
    }

    #[test]
    fn arbitrary_field_values_are_checked_before_use(
        name in "[a./\\x00]{0,4}|[a-z]{1,8}",
        dir_ok in any::<bool>(),
        size in prop_oneof![any::<u64>(), 0u64..300_000],
        chunk_size in prop_oneof![any::<u64>(), Just(65536u64), (0u32..64).prop_map(|s| 1u64 << s)],
        ncrc in 0usize..8,
        crc in any::<u32>(),
        mode in prop_oneof![any::<u32>(), 0u32..0o10000],
    ) {
        let e = Entry {
            store_path: if dir_ok { format!("/x/{name}") } else { format!("/y/{name}") },
            size,
            crc32c: crc,
            chunk_size,
            chunk_crc32c: vec![0; ncrc],
            mode,
            mtime_ns: 0,
            drained_ns: 0,
        };
        if check_entry("x", &name, &e).is_ok() {
            assert_safe("x", &name, &e);
        }
        let mut m = Manifest::new("n0", "u0");
        m.files.insert(name.clone(), e);
        let _ = check_all(&serde_json::to_vec(&m).unwrap());
    }
}
