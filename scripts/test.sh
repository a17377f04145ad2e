#!/usr/bin/env bash
# The README's test command: set up, build everything in release mode, run every test
# suite. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CARGO_TERM_COLOR=never
echo "== build (release)"
cargo build --release --workspace --all-targets
export CKPTFS_BIN_DIR="${CKPTFS_BIN_DIR:-$PWD/target/release}"
echo "== gate: cargo fmt"
cargo fmt --all --check
echo "== gate: cargo clippy (warnings denied, every unsafe block documented)"
cargo clippy --release --workspace --all-targets -- -D warnings -W clippy::undocumented_unsafe_blocks
echo "== gate: cargo doc (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
echo "== cargo test (release)"
cargo test --release --workspace --no-fail-fast
for t in tests/*/run.sh; do
  [ -e "$t" ] || continue
  echo "== $t"
  bash "$t"
done
echo "== all test suites passed"
