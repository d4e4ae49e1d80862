#!/usr/bin/env bash
# Issue 30's protocol on another kind of machine: the lent device machine's host CPU (a
# 16-core Intel Xeon; the profile was measured on a 2-vCPU AMD EPYC VM). One re-level,
# then the cpu2 reports, each run on two physical cores of its own (the development VMs
# have two vCPUs), side by side so that they fit the lease; meanwhile the GPU's full-size
# profile resumes on two more cores. What each stage leaves in $OUT comes back even if a
# later one is cut short; SKIP_RELEVEL=1 keeps the machine's last re-level, SKIP_GPU=1
# leaves the GPU alone. From the repository root, with the pymetis wheel in .whl:
#   OUT=/some/dir bash results/fidelity/xeon-2026-12-04/run.sh
set -u
OUT=${OUT:?set OUT to an empty folder}
DEADLINE_S=${DEADLINE_S:-540}
INCEPTION_ROUNDS=${INCEPTION_ROUNDS:-8}  # 32 rounds take ~20 minutes there, past the lease
START=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 EAGLE_CACHE_DIR=/tmp/eagle-cache
export EAGLE_RELEVEL_DIR=/tmp/eagle-relevel

left() { echo $((DEADLINE_S - ($(date +%s) - START))); }

cli() {  # cli MODULE ARGS...: the module's console script (no pip install here)
    local module=$1
    shift
    python3 -c "import sys, $module as m; sys.exit(m.main(sys.argv[1:]))" "$@"
}

run() {  # run NAME CPUS command...: pinned to CPUS, within the deadline, logged to NAME.log
    local name=$1 cpus=$2
    shift 2
    echo "== $(date +%T) $name on CPUs $cpus: $*"
    timeout "$(left)" taskset -c "$cpus" bash -c "$(declare -f cli); \"\$@\"" _ "$@" \
        >"$OUT/$name.log" 2>&1
    echo "== $(date +%T) $name rc=$? after $(($(date +%s) - START))s"
    # a report is a folder of five files: one archive comes back, many files do not
    if [[ -d "$OUT/$name" ]]; then tar czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"; fi
}

main() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=$PWD:/tmp/site
    lscpu | grep -E "Model name|^CPU\(s\)|Thread\(s\) per core|L3"
    python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__)"
    # one logical CPU per physical core, two cores per job
    mapfile -t cpus < <(lscpu -p=CPU,CORE,SOCKET | grep -v '^#' | awk -F, '!seen[$2 "," $3]++ {print $1}')
    local p=()
    for i in 0 1 2 3; do p+=("${cpus[$((2 * i))]},${cpus[$((2 * i + 1))]}"); done
    echo "pairs of physical cores: ${p[*]}"

    if [[ -z "${SKIP_GPU:-}" ]]; then
        cp simulator/profiles/nvidia-h200.json.gz "$OUT/nvidia-h200-full.json.gz"
        run gpu-profile "${p[3]}" cli eagle.profile --device cuda:0 --type nvidia-h200 \
            --variants small,default --out "$OUT/nvidia-h200-full.json.gz" --no-progress &
    fi

    if [[ -z "${SKIP_RELEVEL:-}" ]]; then  # set: the re-level of an earlier run still applies
        run relevel "${p[0]}" cli eagle.profile --device cpu --relevel
        cat "$OUT/relevel.log"
    fi
    cp /tmp/eagle-relevel/*.json "$OUT/"
    run bert "${p[0]}" cli eagle.validate --suite bert --n 20 --seed 0 --repeats 4 --rounds 32 \
        --out "$OUT/bert" &
    run gnmt "${p[1]}" cli eagle.validate --suite gnmt --n 20 --seed 0 --repeats 4 --rounds 32 \
        --out "$OUT/gnmt" &
    run inception_v3 "${p[2]}" cli eagle.validate --suite inception_v3 --n 20 --seed 0 \
        --repeats 4 --rounds "$INCEPTION_ROUNDS" --out "$OUT/inception_v3" &
    wait
    tail -n 3 "$OUT"/*.log
}

main 2>&1 | tee "$OUT/log.txt"
