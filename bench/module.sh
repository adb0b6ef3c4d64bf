#!/usr/bin/env bash
# bench/module.sh -- kept for habit: runs bench/module_cost.py (the Redis
# module's cost next to a bare SET ... PX, pinned, alternating runs,
# medians with their spread; see that file).
#
#   bench/module.sh [BUILD_DIR] [module_cost.py options...]
set -euo pipefail
BUILD=${1:-build}
shift || true
exec python3 "$(dirname "$0")/module_cost.py" --build "$BUILD" "$@"
