//! The read order of the settings' `[levels]` section (`levels.order`, `CKPTFS_LEVELS`,
//! `--levels`) with its registry levels opened: the one place the CLI lists the level
//! kinds it can open. A new level kind is one factory added to [`FACTORIES`]; the
//! restores (`run --restore`, `restore`), the dataset restart and `ckpt list` then read
//! it through `ckptfs_level::ReadOrder` without knowing its kind.

use crate::config::Ctx;
use anyhow::{Context, Result};
use ckptfs_level::{LevelFactory, ReadOrder};
use std::collections::BTreeMap;

/// The level kinds this binary opens from a `[levels]` entry (`local`, `partner` and
/// `pfs` without a directory are read by the restores' own paths).
pub const FACTORIES: [&dyn LevelFactory; 4] = [
    &ckptfs_object::factory::ObjectFactory,
    &ckptfs_agent::PfsFactory,
    &ckptfs_dirlevel::DirFactory,
    &ckptfs_pool::PoolFactory,
];

/// The settings' read order, its registry levels opened (`--node-id` given to them as
/// their `node` option unless the entry sets one).
pub fn read_order(ctx: &Ctx) -> Result<ReadOrder> {
    let mut extra = BTreeMap::new();
    if let Some(n) = &ctx.node_id {
        extra.insert("node".to_string(), n.clone());
    }
    ckptfs_level::open_levels(&ctx.settings.levels, &FACTORIES, &extra)
        .context("the levels of setting levels.order ([levels], CKPTFS_LEVELS, --levels)")
}
