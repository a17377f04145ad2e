//! The read order from the settings' `[levels]` section ([`ckptfs_settings::levels`]),
//! with its registry levels opened: what a restore, a restart and Python's reader walk.
//!
//! The built-in steps (`local`, `partner`, `pfs`: the node store, the partners' memory,
//! the drain destinations) are read by each front-end's own path, which knows the
//! cluster and the drain's node manifests; every other entry is a level opened by the
//! factory of its kind ([`LevelFactory`]) into a [`Registry`] and read through the
//! [`Level`] interface. [`ReadOrder::steps`] interleaves both in the order listed.

use crate::{Level, LevelError, LevelFactory, LevelId, Registry};
use ckptfs_settings::levels::LevelsSettings;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One step of a read order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The node store.
    Local,
    /// The partners' memory (in a cluster).
    Partner,
    /// The drain destinations (`--dest`, `CKPTFS_DEST`), with the node manifests.
    Pfs,
    /// A level of [`ReadOrder::registry`].
    Level(LevelId),
}

impl Step {
    /// The settings' name of a built-in step (`local`, `partner`, `pfs`); None for a
    /// registry level.
    pub fn builtin_name(&self) -> Option<&'static str> {
        match self {
            Step::Local => Some("local"),
            Step::Partner => Some("partner"),
            Step::Pfs => Some("pfs"),
            Step::Level(_) => None,
        }
    }
}

/// The levels to read, in order, with the registry holding the opened ones.
#[derive(Debug, Clone)]
pub struct ReadOrder {
    /// The steps in read order (`Local` first).
    pub steps: Vec<Step>,
    /// The opened levels of the [`Step::Level`] steps, in the same order.
    pub registry: Registry,
}

impl Default for ReadOrder {
    /// The order before the `[levels]` section: local, partner, pfs; no other level.
    fn default() -> Self {
        ReadOrder {
            steps: vec![Step::Local, Step::Partner, Step::Pfs],
            registry: Registry::new(),
        }
    }
}

impl ReadOrder {
    /// Whether `step` is read.
    pub fn reads(&self, step: &Step) -> bool {
        self.steps.contains(step)
    }

    /// The registry levels and the built-in steps after the node store and the
    /// partners, in order: what is read once neither holds a file.
    pub fn beyond_partners(&self) -> impl Iterator<Item = &Step> {
        self.steps
            .iter()
            .filter(|s| !matches!(s, Step::Local | Step::Partner))
    }

    /// Whether the set levels of kind `kind` (the kind of a
    /// [`crate::SetProtection::id`]) are read. A kind the settings name as a built-in
    /// step (`partner`) is read only where the order lists it; any other set level
    /// (none can be listed) is read at the set levels' place, right after the node
    /// store: where `partner` stands when it is listed.
    pub fn reads_set_kind(&self, kind: &str) -> bool {
        if ckptfs_settings::levels::BUILTIN.contains(&kind) {
            self.steps.iter().any(|s| s.builtin_name() == Some(kind))
        } else {
            true
        }
    }

    /// The opened level of a [`Step::Level`].
    pub fn level(&self, id: &LevelId) -> Option<&Arc<dyn Level>> {
        self.registry.get(id)
    }
}

/// Build the read order of `settings`: the built-in steps as they are listed, every
/// other entry opened by the factory of its kind with its options, plus `extra` options
/// the entry does not set itself (`node`: this node's id, which the front-end knows; a
/// factory ignores or refuses options it does not know, so pass only common ones).
/// Errors name the entry (its id) and, for a kind no factory opens, the kinds known.
pub fn open_levels(
    settings: &LevelsSettings,
    factories: &[&dyn LevelFactory],
    extra: &BTreeMap<String, String>,
) -> Result<ReadOrder, LevelError> {
    let mut steps = Vec::new();
    let mut registry = Registry::new();
    for e in &settings.order {
        if e.builtin() {
            steps.push(match e.kind.as_str() {
                "local" => Step::Local,
                "partner" => Step::Partner,
                _ => Step::Pfs,
            });
            continue;
        }
        let id = LevelId::new(e.kind.clone(), e.instance.clone());
        let mut opts = e.options.clone();
        for (k, v) in extra {
            opts.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let one = crate::registry::open_all(&[(id.clone(), opts)], factories).map_err(|err| {
            let msg = err.to_string();
            if msg.contains(&id.to_string()) {
                err
            } else {
                LevelError::backend(err.errno(), std::io::Error::other(format!("level {id}: {msg}")))
            }
        })?;
        for l in one.levels() {
            // The level's own id (its factory may spell the instance its way).
            steps.push(Step::Level(l.id()));
            registry.push(l.clone());
        }
    }
    Ok(ReadOrder { steps, registry })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckptfs_settings::levels::parse_order;

    fn settings(v: &str) -> LevelsSettings {
        LevelsSettings {
            order: parse_order(v).unwrap(),
        }
    }

    #[test]
    fn builtin_steps_keep_their_places_and_unknown_kinds_are_named() {
        let o = open_levels(&settings("local,partner,pfs"), &[], &BTreeMap::new()).unwrap();
        assert_eq!(o.steps, ReadOrder::default().steps);
        assert_eq!(o.registry.levels().len(), 0);
        let o = open_levels(&settings("local,pfs"), &[], &BTreeMap::new()).unwrap();
        assert!(!o.reads(&Step::Partner) && o.reads(&Step::Pfs));
        // Set levels: a kind with a built-in step only where it is listed, any other
        // kind at the set levels' place.
        assert!(!o.reads_set_kind("partner") && o.reads_set_kind("mirror"));
        assert!(ReadOrder::default().reads_set_kind("partner"));
        let e = open_levels(&settings("local,tape:lib1"), &[], &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("tape:lib1") && e.contains("no level of kind"), "{e}");
        assert_eq!(
            open_levels(&settings("local,tape:lib1"), &[], &BTreeMap::new())
                .unwrap_err()
                .errno(),
            libc::EINVAL
        );
    }
}
