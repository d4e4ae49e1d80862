#!/usr/bin/env bash
# The one prepared run on a lent H200 machine (the `device` tool; results/fidelity/README.md,
# "H200"). It profiles the GPU on the small suites, re-levels the CPU workers' profile on
# the host, validates the h200 cluster (gpu0 + the host's cpu0) on the three small suites,
# then profiles the full-size suites with the time left. Every stage has its own time
# limit, all within DEADLINE_S; what a stage leaves in $OUT comes back even if a later one
# fails. From the repository root, with the pymetis wheel in .whl (the machine has the
# rest of the project's packages, torch 2.11 among them):
#   OUT=/some/dir bash results/fidelity/h200/run_on_h200.sh
set -u
OUT=${OUT:?set OUT to an empty folder}
DEADLINE_S=${DEADLINE_S:-390}
ROUNDS=${ROUNDS:-8}
START=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 EAGLE_CACHE_DIR=/tmp/eagle-cache
export EAGLE_RELEVEL_DIR=/tmp/eagle-relevel

stage() {  # stage MAX_SECONDS command...: run it within MAX_SECONDS and the deadline
    local left=$((DEADLINE_S - ($(date +%s) - START)))
    local limit=$(($1 < left ? $1 : left))
    shift
    echo "== $(date +%T) [${limit}s] $*"
    if ((limit < 10)); then echo "== skipped: past the deadline"; return 1; fi
    timeout "$limit" bash -c "$(declare -f cli); \"\$@\"" _ "$@"
    echo "== rc=$? after $(($(date +%s) - START))s"
}

cli() {  # cli MODULE ARGS...: the module's console script (no pip install here)
    local module=$1
    shift
    python3 -c "import sys, $module as m; sys.exit(m.main(sys.argv[1:]))" "$@"
}

main() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=$PWD:/tmp/site
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    lscpu | grep -E "Model name|^CPU\(s\)"
    python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
    stage 45 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_executor.py tests/test_profiler.py
    if [[ -n "${PROFILE_IN:-}" ]]; then  # a profile of an earlier lease: its steps again
        cp "$PROFILE_IN" "$OUT/nvidia-h200.json.gz"
        stage 60 cli eagle.profile --device cuda:0 --type nvidia-h200 --suites gnmt,inception_v3,bert \
            --steps-only --out "$OUT/nvidia-h200.json.gz"
    else
        stage 130 cli eagle.profile --device cuda:0 --type nvidia-h200 --variants small \
            --out "$OUT/nvidia-h200.json.gz" --no-progress
    fi
    cp "$OUT/nvidia-h200.json.gz" simulator/profiles/ || return
    # the cluster's host link: the copies the profile just fitted
    python3 - "$OUT/nvidia-h200.json.gz" "$OUT/h200.yaml" <<'PY'
import sys
from pathlib import Path
from simulator.profile import Profile
link = Profile.load(Path(sys.argv[1])).fit["link"]
text = Path("simulator/clusters/h200.yaml").read_text()
fitted = f"default: {{bandwidth: {link['bandwidth']:.4g}, latency: {link['copy_latency']:.4g}}}"
text = text.replace("default: {bandwidth: 20e9, latency: 15e-6}", fitted)
Path(sys.argv[2]).write_text(text)
print("h200 link:", fitted)
PY
    if [[ -n "${RELEVEL_IN:-}" ]]; then  # the CPU re-level of an earlier lease
        mkdir -p /tmp/eagle-relevel && cp "$RELEVEL_IN" /tmp/eagle-relevel/
    else
        stage 100 cli eagle.profile --device cpu --relevel
        cp /tmp/eagle-relevel/*.json "$OUT/" 2>/dev/null
    fi
    for suite in bert gnmt inception_v3; do
        stage "${VALIDATE_S:-60}" cli eagle.validate --suite "$suite" --cluster "$OUT/h200.yaml" \
            --n 20 --seed 0 --repeats 4 --rounds "$ROUNDS" --out "/tmp/validate/$suite"
        tar czf "$OUT/validate.tgz" -C /tmp validate
    done
    cp "$OUT/nvidia-h200.json.gz" "$OUT/nvidia-h200-full.json.gz"
    stage 600 cli eagle.profile --device cuda:0 --type nvidia-h200 --variants small,default \
        --out "$OUT/nvidia-h200-full.json.gz" --no-progress
}

main 2>&1 | tee "$OUT/log.txt"
