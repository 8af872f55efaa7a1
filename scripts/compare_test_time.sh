#!/usr/bin/env bash
# The test suite's wall time at two commits, side by side on one machine: each clone is run
# ROUNDS times, alternating, with CI=true pytest -q inside the clone's own .venv.
#
#   scripts/compare_test_time.sh /tmp/old-clone /tmp/new-clone [ROUNDS]
#
# Each clone needs its venv made as CI makes it (python3 -m venv .venv; pip install torch==2.13.0;
# pip install -e ".[offline,test]"). Prints the CPU, then per run the commit, pytest's summary line
# and the slowest tests.
set -u
rounds=${3:-2}
grep -m1 "model name" /proc/cpuinfo
grep -o -w "avx2\|avx512_bf16\|amx_bf16\|amx_tile" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
for _ in $(seq "$rounds"); do
  for dir in "$1" "$2"; do
    (cd "$dir" && . .venv/bin/activate && echo "== $dir $(git log --oneline -1 | cut -c1-7)" \
      && CI=true pytest -q -p no:cacheprovider --durations=12 2>&1 | tail -16)
  done
done
