//! `ckptfs ls`: a directory of the store. `-l` adds per entry the mode, links, state,
//! size, chunks, time, the levels holding each file (`[local, partner:node3,
//! pfs:/scratch/run]`) and the protection its dataset gets (`ds3:partner`: the level
//! policy's choice as `dataset_partner_copies` applies it, crate `ckptfs-datasets`,
//! module `protection`), then one line per dataset listed saying which protection and
//! why. `--json` gives the same per entry.

use crate::config::Ctx;
use crate::store_cmds::{attach, join, mode_str, state_str, time_str};
use crate::text::esc;
use anyhow::{Context, Result};
use ckptfs_datasets::protection::{FileProtections, Protection};
use ckptfs_store::{FileKind, Stat, Store};
use std::collections::BTreeMap;

/// What a long or JSON listing adds to names: the levels record and the datasets.
struct Long {
    levels: ckptfs_node::LevelsView,
    datasets: FileProtections,
    /// Datasets of the files listed so far, by id (the notes after the listing).
    seen: std::cell::RefCell<BTreeMap<(String, u64), Protection>>,
}

impl Long {
    fn load(ctx: &Ctx, store: &Store) -> Long {
        Long {
            levels: ckptfs_node::LevelsView::load(store),
            datasets: FileProtections::load(store, ctx.partner_copies()),
            seen: Default::default(),
        }
    }

    /// The protection of the dataset holding this version of `path` (files only).
    fn protection(&self, path: &str, st: &Stat) -> Option<&Protection> {
        if st.kind != FileKind::File {
            return None;
        }
        let p = self.datasets.of(path, st)?;
        self.seen
            .borrow_mut()
            .entry((p.job.clone(), p.id))
            .or_insert_with(|| p.clone());
        Some(p)
    }
}

/// The protection column of a long listing: `ds<ID>:<short>`, `(policy)` added when the
/// dataset is node-local by the policy's choice; `-` for a file of no dataset.
fn protection_cell(p: Option<&Protection>) -> String {
    match p {
        None => "-".into(),
        Some(p) if p.node_local_by_choice => format!("ds{}:local(policy)", p.id),
        Some(p) => format!("ds{}:{}", p.id, p.short),
    }
}

fn print_entry(store: &Store, name: &str, st: &Stat, long: Option<(&Long, &str)>) {
    let Some((l, path)) = long else {
        println!("{}{}", esc(name), if st.kind == FileKind::Dir { "/" } else { "" });
        return;
    };
    // A symbolic link shows its target, as `ls -l` does.
    let target = if st.kind == FileKind::Symlink {
        match store.readlink(path) {
            Ok(t) => format!(" -> {}", esc(&String::from_utf8_lossy(&t))),
            Err(e) => format!(" -> ? ({e})"),
        }
    } else {
        String::new()
    };
    println!(
        "{} {:>3} {:>10} {:>12} {:>5} chunks{} {} {} {} {}{}{}",
        mode_str(st),
        // Names of the file (hard links); a directory's count is not kept.
        if st.kind == FileKind::Dir {
            "-".to_string()
        } else {
            st.nlink.to_string()
        },
        state_str(st.state),
        st.size,
        st.chunks,
        if st.spill_chunks > 0 {
            format!(" ({} spill)", st.spill_chunks)
        } else {
            String::new()
        },
        time_str(st.mtime_ns),
        // The levels holding the file and its dataset's protection, before the name
        // (which ends the line).
        if st.kind == FileKind::File {
            format!("[{}]", esc(&l.levels.of(path, st).summary()))
        } else {
            "-".to_string()
        },
        protection_cell(l.protection(path, st)),
        esc(name),
        if st.kind == FileKind::Dir { "/" } else { "" },
        target,
    );
}

/// One entry of `ls --json`.
fn entry_json(path: &str, name: &str, st: &Stat, l: &Long) -> serde_json::Value {
    let levels = if st.kind == FileKind::File {
        serde_json::to_value(l.levels.of(path, st)).unwrap_or_default()
    } else {
        serde_json::Value::Null
    };
    serde_json::json!({
        "path": path,
        "name": name,
        "kind": format!("{:?}", st.kind).to_lowercase(),
        "mode": mode_str(st),
        "size": st.size,
        "state": format!("{:?}", st.state).to_lowercase(),
        "mtime_ns": st.mtime_ns,
        "chunks": st.chunks,
        "spill_chunks": st.spill_chunks,
        "levels": levels,
        "dataset": l.protection(path, st),
    })
}

/// `ckptfs ls [-l] [-R] [--json] PATH`.
pub fn ls(ctx: &Ctx, path: &str, long: bool, recursive: bool, json: bool) -> Result<i32> {
    let store = attach(ctx)?;
    let st = store.stat(path).with_context(|| format!("ls {path}"))?;
    let l = (long || json).then(|| Long::load(ctx, &store));
    let mut out = Vec::new();
    let mut show = |name: &str, p: &str, st: &Stat| match (&l, json) {
        (Some(l), true) => out.push(entry_json(p, name, st, l)),
        (l, _) => print_entry(&store, name, st, l.as_ref().map(|l| (l, p))),
    };
    if st.kind == FileKind::File {
        show(path, path, &st);
    } else {
        let mut dirs = vec![path.to_string()];
        let mut first = true;
        while let Some(dir) = dirs.pop() {
            let mut entries = store.read_dir(&dir).with_context(|| format!("ls {dir}"))?;
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            if recursive && !json {
                if !first {
                    println!();
                }
                println!("{}:", esc(&dir));
            }
            first = false;
            let mut sub = Vec::new();
            for e in entries {
                let p = join(&dir, &e.name);
                // An entry may vanish between listing and stat: skip it.
                let Ok(st) = store.stat(&p) else { continue };
                show(&e.name, &p, &st);
                if recursive && e.kind == FileKind::Dir {
                    sub.push(p);
                }
            }
            dirs.extend(sub.into_iter().rev());
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    // After a long listing: each dataset listed, which protection and why.
    if let Some(l) = &l {
        let seen = l.seen.borrow();
        if !seen.is_empty() {
            println!();
        }
        for p in seen.values() {
            println!(
                "ds{}: dataset {} {} (job {}, {}): {}",
                p.id,
                p.id,
                esc(&p.name),
                esc(&p.job),
                p.state,
                esc(&p.note)
            );
        }
    }
    Ok(0)
}
