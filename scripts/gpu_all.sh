#!/usr/bin/env bash
# Every GPU measurement in one go, each writing its results file, within one time budget:
#
#   scripts/gpu_all.sh [PART ...]
#
# Parts, by default in this order (by value: what runs out of time is last): grid ft cuda-tests
# profile check parity-conll parity-grid-encoder parity-wnut extract-precision (the parity tables are
# committed).
#
# grid        scripts/bench_grid.py: the 300-run Figure-3 grid at roberta-large shape, extraction included
# parity-conll, parity-wnut   scripts/compare_cuda_cpu.py on CUDA: every fusion, solo and packed, seeds
#             0-2, MiniLM over CoNLL-2003 / the built-in WNUT-16 (the CPU side runs on any machine: the same
#             command with --device cpu)
# parity-grid-encoder         the grid's encoder: extra and concat at N = 8, on CUDA and on this CPU
# ft          scripts/bench_ft_step.py: an FT step against the backbone alone, roberta-large shape and MiniLM
#             (FT_PROFILE=1: with its operator tables)
# cuda-tests  pytest -m cuda, on the modules that hold them
# check       scripts/gpu_check.py: every command as a user types it, on the built-in default
# extract-precision  scripts/compare_extract_precision.py: MiniLM over CoNLL-2003 extracted in fp32 and in
#             bf16, heads trained on each: bf16's speed where it is a choice (an avx2 CPU's is committed)
# profile     scripts/profile_pack_step.py: a Figure-3 cell's pack step at roberta-large shape, by phase
#             and operator, on batches of CoNLL-2003's sentence lengths (FUSIONS, default concat,dwatt,extra)
#
# One call does not hold them all: on an H200 the grid took 355 s with its encoder, and gpu-check
# wanted more than the 162 s left after it (docs/results/gpu/gpu_all_h200.log). With 15 minutes of
# device time, two calls on one warm machine: "grid check" (BUDGET_S=565), then at once "ft cuda-tests"
# (BUDGET_S=225; ft reads the grid's entry, still on the machine).
#
# Inputs (environment): ASSETS (default .gpu) holds minilm-fp16/ (all-MiniLM-L6-v2's weights and
# tokenizer, weights in float16 for the transfer; read in float32) and conll2003/, each folder or a .tgz of it;
# WORK (default /tmp/gpu_all) the work folder; RESULTS (default $WORK/results) where every results
# file goes; BUDGET_S (default 570) the seconds all parts may take together: a part gets at most
# what is left, less RESERVE_S (default 15) for packing the results. Each part's exit status and
# seconds are logged; a part that fails or runs out of time does not stop the next. GRID_S (default
# 420) caps the grid part: the whole 300-run grid took 370 s in it on an H100, extraction included
# (docs/results/bench_grid_gpu.md).
set -u
cd "$(dirname "$0")/.."
ASSETS=${ASSETS:-.gpu}
WORK=${WORK:-/tmp/gpu_all}
RESULTS=${RESULTS:-$WORK/results}
BUDGET_S=${BUDGET_S:-570}
RESERVE_S=${RESERVE_S:-15}
START=$(date +%s)
mkdir -p "$WORK" "$RESULTS"
export PYTHONUNBUFFERED=1 LAYERFUSE_HOME="$WORK/home"

left() { echo $(( BUDGET_S - RESERVE_S - ($(date +%s) - START) )); }

# part NAME MAX_S COMMAND...: COMMAND for at most MAX_S seconds (or what is left), logged
part() {
    local name=$1 max=$2; shift 2
    local budget; budget=$(left)
    (( budget < max )) && max=$budget
    if (( max < 10 )); then echo "== $name: skipped, ${max}s left"; return; fi
    echo "== $name: up to ${max}s: $*"
    local t0; t0=$(date +%s)
    timeout --signal=INT --kill-after=10 "$max" "$@"
    local rc=$?
    echo "== $name: exit $rc after $(( $(date +%s) - t0 ))s"
}

for asset in conll2003 minilm-fp16; do  # each a folder, or a .tgz of it (smaller to carry)
    if [ ! -d "$ASSETS/$asset" ] && [ -f "$ASSETS/$asset.tgz" ]; then
        tar xzf "$ASSETS/$asset.tgz" -C "$ASSETS"
    fi
done
MINILM=$ASSETS/minilm-fp16
CONLL=$ASSETS/conll2003
ENCODER=$WORK/encoder
python3 - <<'EOF'
import torch
print("gpu:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none", "; torch", torch.__version__)
EOF

# entry_in ROOT: the (first) entry under a cache root; entries of a model given by a relative path
# are named from it and may start with a dot, which a shell glob would pass by
entry_in() {
    find "$1" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort | head -1
}

grid() {
    # the encoder stands in for a downloaded roberta-large: built before the grid's clock starts
    part encoder 120 python3 -c "import sys; sys.path.insert(0, 'scripts'); from pathlib import Path; \
from _common import build_encoder; build_encoder(Path('$ENCODER'), '$MINILM')"
    part grid "${GRID_S:-420}" python3 scripts/bench_grid.py --out "$WORK/grid" --data "$CONLL" --model "$ENCODER" \
        --report "$RESULTS/bench_grid_gpu.md"
    cp "$WORK/grid/grid.jsonl" "$RESULTS/bench_grid_gpu_runs.jsonl" 2>/dev/null
}

parity_conll() {
    part parity-conll 110 python3 scripts/compare_cuda_cpu.py --model "$MINILM" --data "$CONLL" --device cuda \
        --out "$WORK/parity/conll-cuda"
    keep_parity
}

parity_wnut() {
    part parity-wnut 70 python3 scripts/compare_cuda_cpu.py --model "$MINILM" --device cuda \
        --out "$WORK/parity/wnut-cuda"
    keep_parity
}

parity_grid_encoder() {
    # is extra's dev F1 of 0 in the grid the random encoder's or the CUDA path's? the same runs on this CPU
    local entry; entry=$(entry_in "$WORK/grid/cache")
    [ -z "$entry" ] && return
    for device in cuda cpu; do
        part "parity-grid-encoder-$device" 100 python3 scripts/compare_cuda_cpu.py --cache "$entry" \
            --device $device --fusions extra,concat --shots 8 --epochs 25 --precision bf16 --modes solo \
            --out "$WORK/parity/roberta-$device"
    done
    keep_parity
}

keep_parity() {
    for f in "$WORK"/parity/*/records.jsonl; do
        [ -f "$f" ] && cp "$f" "$RESULTS/parity_$(basename "$(dirname "$f")").jsonl"
    done
}

ft() {
    local entry; entry=$(entry_in "$WORK/grid/cache")
    for precision in bf16 fp32; do
        [ -n "$entry" ] && part "ft-roberta-$precision" 50 python3 scripts/bench_ft_step.py --cache "$entry" \
            --steps 8 --precision $precision --project ${FT_PROFILE:+--profile} \
            --report "$RESULTS/bench_ft_step_roberta_$precision.md"
    done
    local minilm; minilm=$(entry_in "$WORK/parity/conll-cuda/cache")
    for precision in bf16 fp32; do
        [ -n "$minilm" ] && part "ft-minilm-$precision" 35 python3 scripts/bench_ft_step.py --cache "$minilm" \
            --steps 12 --precision $precision --report "$RESULTS/bench_ft_step_minilm_$precision.md"
    done
}

cuda_tests() {
    # the modules that hold the CUDA tests (collecting all of tests/ would import the slow tests' servers)
    part cuda-tests 90 python3 -m pytest -q -m cuda -p no:cacheprovider tests/training/test_no_host_sync.py \
        tests/training/test_store.py tests/training/test_pack_narrow_grads.py
}

check() {
    # the check types the commands as a user does: the package's console scripts must be installed
    command -v extract >/dev/null || python3 -m pip install -q --no-deps --no-index --no-build-isolation -e .
    part gpu-check 240 python3 scripts/gpu_check.py --model "$MINILM" --json "$RESULTS/gpu_check_minilm.json"
}

extract_precision() {
    part extract-precision 150 python3 scripts/compare_extract_precision.py --model "$MINILM" --data "$CONLL" \
        --cache-dir "$WORK/extract-precision/cache" --out "$WORK/extract-precision/runs" \
        --workers 0 --table "$RESULTS/compare_extract_precision_gpu.md"
}

profile() {
    part profile 120 python3 scripts/profile_pack_step.py --fusions "${FUSIONS:-concat,dwatt,extra}" \
        --data "$CONLL" --report "$RESULTS/profile_pack_step_gpu_conll.md"
}

for p in "${@:-grid ft cuda-tests profile check parity-conll parity-grid-encoder parity-wnut extract-precision}"; do
    for name in $p; do "${name//-/_}"; done
done
echo "== all parts: $(( $(date +%s) - START ))s; results in $RESULTS:"
ls -la "$RESULTS"
