//! One strategy walking through one failure history (the simulator's inner loop).

use super::*;

/// A retained checkpoint.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The state it holds (segments of progress).
    k: u64,
    level: Level,
    /// When its write started.
    written: f64,
    broken: bool,
}

/// What the job does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Compute,
    Checkpoint,
    /// Just restarted from a checkpoint at this level.
    Reprotect(Level),
}

/// One strategy walking through one failure history.
pub(super) struct Walk<'a> {
    cfg: &'a SimConfig,
    roles: &'a Roles,
    events: &'a [FailureEvent],
    horizon: f64,
    next: usize,
    last_hard: Vec<f64>,
    /// Newest checkpoint per level.
    entries: [Option<Entry>; 3],
    /// Time of the newest hard failure of a backup node.
    last_backup_hard: f64,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        cfg: &'a SimConfig,
        roles: &'a Roles,
        events: &'a [FailureEvent],
        horizon: f64,
    ) -> Self {
        Walk {
            cfg,
            roles,
            events,
            horizon,
            next: 0,
            last_hard: vec![f64::NEG_INFINITY; cfg.nodes as usize],
            entries: [
                None,
                None,
                // The job's input: state 0 on the PFS.
                Some(Entry {
                    k: 0,
                    level: Level::Pfs,
                    written: f64::NEG_INFINITY,
                    broken: false,
                }),
            ],
            last_backup_hard: f64::NEG_INFINITY,
        }
    }

    /// Processes failures before `until`; returns the time of the first one
    /// that hits a source node (the job stops), or `None`.
    fn advance(&mut self, until: f64) -> Result<Option<f64>, HorizonExceeded> {
        if until > self.horizon {
            return Err(HorizonExceeded);
        }
        while let Some(e) = self.events.get(self.next) {
            if e.time >= until {
                break;
            }
            self.next += 1;
            if e.hard {
                self.hard_failure(e.node, e.time);
            }
            if self.roles.is_source[e.node as usize] {
                return Ok(Some(e.time));
            }
        }
        Ok(None)
    }

    fn hard_failure(&mut self, node: u32, time: f64) {
        let x = node as usize;
        self.last_hard[x] = time;
        if self.roles.is_backup[x] {
            self.last_backup_hard = time;
        }
        for i in 0..2 {
            if let Some(mut e) = self.entries[i] {
                if !e.broken && self.breaks(&e, x) {
                    e.broken = true;
                    self.entries[i] = Some(e);
                }
            }
        }
    }

    /// Does the hard failure of node `x` (already recorded) lose `e`?
    fn breaks(&self, e: &Entry, x: usize) -> bool {
        let r = self.roles;
        match e.level {
            Level::Local => r.is_source[x],
            Level::Partner => {
                let lost = |s: usize| {
                    let remote = self.last_hard[r.backup_of[s] as usize] >= e.written;
                    let local = self.cfg.remote_only || self.last_hard[s] >= e.written;
                    remote && local
                };
                (r.is_source[x] && lost(x)) || r.backed_by[x].is_some_and(|s| lost(s as usize))
            }
            Level::Pfs => false,
        }
    }

    fn cost(&self, level: Level) -> crate::decide::LevelCost {
        // Strategies only use levels whose costs exist (checked up front).
        self.cfg.costs.get(level).unwrap_or(self.cfg.costs.pfs)
    }

    fn choose(&self, strategy: Strategy, alarms: Option<&Alarms>, t: f64, k: u64) -> Level {
        match (strategy, alarms) {
            (Strategy::Fixed(l), _) => l,
            (Strategy::Adaptive(predictor), Some(a)) => {
                let tau = self.cfg.tau;
                let k_pfs = self.entries[2].map_or(0, |e| e.k);
                let n = |since: u64| (k.saturating_sub(since + 1)).min(u64::from(u32::MAX)) as u32;
                let n_partner = self.entries[1]
                    .filter(|e| !e.broken && e.k > k_pfs)
                    .map(|e| n(e.k));
                // The checkpoint must survive its own write, the segment and
                // the write of the next checkpoint.
                let c_max = self
                    .cfg
                    .costs
                    .levels()
                    .into_iter()
                    .filter_map(|l| self.cfg.costs.get(l))
                    .map(|c| c.checkpoint_s)
                    .fold(0.0, f64::max);
                let (source_alarm, backup_alarm) =
                    a.window(self.roles, self.cfg.remote_only, t, t + tau + 2.0 * c_max);
                let input = DecisionInput {
                    costs: self.cfg.costs,
                    tau,
                    predictor,
                    source_alarm,
                    backup_alarm,
                    n_pfs: n(k_pfs),
                    n_partner,
                    soft_fraction: self.cfg.soft_fraction,
                    rollback: self.cfg.rollback,
                };
                decide(&input).level
            }
            (Strategy::Adaptive(_), None) => Level::Pfs,
        }
    }

    /// Rolls back after a source failure at `tf`; returns the time the job
    /// computes again, the state it resumes from and the level it came from.
    fn recover(&mut self, mut tf: f64, out: &mut Outcome) -> Result<(f64, u64, Level), HorizonExceeded> {
        out.failures += 1;
        let newest = self.entries.iter().flatten().map(|e| e.k).max().unwrap_or(0);
        let mut first = true;
        loop {
            let e = self
                .entries
                .iter()
                .flatten()
                .filter(|e| !e.broken)
                .max_by_key(|e| e.k)
                .copied()
                // The PFS entry is never broken.
                .unwrap_or(Entry {
                    k: 0,
                    level: Level::Pfs,
                    written: f64::NEG_INFINITY,
                    broken: false,
                });
            if first && e.k < newest {
                out.fallbacks += 1;
            }
            first = false;
            for slot in self.entries.iter_mut() {
                if slot.is_some_and(|x| x.k > e.k) {
                    *slot = None;
                }
            }
            let r = self.cost(e.level).restart_s;
            match self.advance(tf + r)? {
                None => {
                    out.restart += r;
                    return Ok((tf + r, e.k, e.level));
                }
                Some(t2) => {
                    out.restart += t2 - tf;
                    out.failures += 1;
                    tf = t2;
                }
            }
        }
    }

    /// What follows a restart: with `reprotect`, the adaptive strategy decides
    /// again for the restored checkpoint (a restart starts a new segment).
    fn after_restart(&self, strategy: Strategy, restored: Level) -> Phase {
        match strategy {
            Strategy::Adaptive(_) if self.cfg.reprotect && restored != Level::Pfs => {
                Phase::Reprotect(restored)
            }
            _ => Phase::Compute,
        }
    }

    pub(super) fn run(
        &mut self,
        strategy: Strategy,
        alarms: Option<&Alarms>,
    ) -> Result<Outcome, HorizonExceeded> {
        let tau = self.cfg.tau;
        let budget = self.cfg.segments as f64 * tau;
        let mut out = Outcome::default();
        let mut t = 0.0;
        let mut k: u64 = 0;
        let mut used = 0.0;
        let mut tail = 0.0;
        let mut phase = Phase::Compute;
        loop {
            match phase {
                Phase::Compute => {
                    let left = budget - used;
                    if left <= 1e-9 * budget {
                        break;
                    }
                    let dur = left.min(tau);
                    match self.advance(t + dur)? {
                        None => {
                            used += dur;
                            t += dur;
                            if dur < tau {
                                tail = dur;
                                break;
                            }
                            k += 1;
                            phase = Phase::Checkpoint;
                        }
                        Some(tf) => {
                            used += tf - t;
                            let (t2, k2, restored) = self.recover(tf, &mut out)?;
                            (t, k) = (t2, k2);
                            phase = self.after_restart(strategy, restored);
                        }
                    }
                }
                Phase::Checkpoint | Phase::Reprotect(_) => {
                    let level = self.choose(strategy, alarms, t, k);
                    if let Phase::Reprotect(restored) = phase {
                        // Only move the restored checkpoint up, never down.
                        if level <= restored {
                            phase = Phase::Compute;
                            continue;
                        }
                        out.reprotects += 1;
                    }
                    let c = self.cost(level).checkpoint_s;
                    let start = t;
                    let backup_hard_before = self.last_backup_hard;
                    match self.advance(t + c)? {
                        None => {
                            out.checkpoint += c;
                            t += c;
                            out.counts[level.index()] += 1;
                            // A backup that failed hard during the write took
                            // its partial copies along (only matters without a
                            // local copy: sources did not fail, or we would not
                            // be here).
                            let broken = level == Level::Partner
                                && self.cfg.remote_only
                                && self.last_backup_hard > backup_hard_before;
                            self.entries[level.index()] = Some(Entry {
                                k,
                                level,
                                written: start,
                                broken,
                            });
                            phase = Phase::Compute;
                        }
                        Some(tf) => {
                            out.checkpoint += tf - t;
                            let (t2, k2, restored) = self.recover(tf, &mut out)?;
                            (t, k) = (t2, k2);
                            phase = self.after_restart(strategy, restored);
                        }
                    }
                }
            }
        }
        out.rework = (used - (k as f64 * tau + tail)).max(0.0);
        out.end_time = t;
        Ok(out)
    }
}
