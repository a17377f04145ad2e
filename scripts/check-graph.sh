#!/usr/bin/env bash
# The shape of the code, a gate of scripts/test.sh (scripts/check_graph.py does the work):
#  - no import circle among a crate's modules (`use` lines and inline `crate::a::f()` paths;
#    the circles known when paths were first counted are listed in check_graph.py);
#  - the crate graph block in docs/design.md matches `cargo metadata` (--fix rewrites it);
#  - no library crate depends on the bench crate, the network simulator, clap or anyhow,
#    and `cargo tree -e normal -p ckptfs-capi` has no tokio, fuser, clap or ckptfs-node.
#
#   scripts/check-graph.sh                 check (exit 1 on a finding)
#   scripts/check-graph.sh --fix           also rewrite docs/design.md's crate graph
#   scripts/check-graph.sh --list-imports  print each module's imports of its crate
#   scripts/check-graph.sh --use-only      count `use` lines only (not inline paths)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/check_graph.py --self-test
exec python3 scripts/check_graph.py "$@"
