#!/usr/bin/env bash
# FUSE conformance suite of scripts/test.sh: pjdfstest on tmpfs, the CRFS mount and the
# store mount in one run (see tests/fuse/pjdfstest.sh).
set -euo pipefail
exec bash "$(dirname "$0")/pjdfstest.sh"
