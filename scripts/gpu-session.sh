#!/usr/bin/env bash
# One session on an offline GPU machine in one command of about 9 minutes: install the carried wheels, run
# `pytest -m gpu`, then the GPU benchmarks. Every stage is time-boxed, so a failure or a hang costs only that
# stage, and everything lands in $OUT in at most 6 files (session.log, pytest-gpu.log, pytest-gpu.xml,
# bench.tar.gz, summary.md, env.txt); the summary is also the last thing printed.
#
#   bash scripts/gpu-session.sh                           # all stages within BUDGET=540 s, wheels from .whl
#   STAGES="install tests" bash scripts/gpu-session.sh    # a subset of: install tests bench
#   BENCH="decode mfu" STAGES="install bench" bash scripts/gpu-session.sh
#   BENCH="decode mfu" SHARES="decode=120 mfu=200" bash scripts/gpu-session.sh   # more seconds for fewer benchmarks
#   DRY=1 bash scripts/gpu-session.sh                     # rehearsal on a CPU machine (GPU parts skip or run quick)
#   BENCH=grid_throughput STAGES="install tests bench" bash scripts/gpu-session.sh   # runs stacked: tokens/s and MFU
#     per card for `tiny` and `small`, one run per process against stacked and stacked + graphed
#
# The tests are `pytest -m gpu` over $GPU_TESTS: tests/test_gpu.py and the stacked runs' CUDA-graph step
# (tests/stacking/test_engine.py).
#
# Install: the wheels go into /tmp/site with --no-deps --target (nothing of the machine is touched, PyTorch
# above all), the project runs from this source tree; both through PYTHONPATH. While the tests run, the same
# benchmarks run once in the background with one round each (WARM=1): that fills torch.compile's caches, so the
# measured run compiles in a fraction of the time (set WARM=0 to keep the GPU to the tests).
set -u -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

OUT=${OUT:-$PWD/gpu-session}
WHEELS=${WHEELS:-.whl}
BUDGET=${BUDGET:-540}
STAGES=${STAGES:-install tests bench}
BENCH=${BENCH:-mfu variant_overhead hf_throughput loop_overhead decode}
DRY=${DRY:-0}
WARM=${WARM:-$((1 - DRY))}
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
TESTS_S=${TESTS_S:-170}
# Seconds per benchmark. Each is told 25 less (`--budget-s`: its start-up and the timing after the last build);
# at its limit it gets SIGTERM, stops building, times what it has and writes it, and SIGKILL follows 25 s later.
declare -A SHARE=([mfu]=95 [variant_overhead]=85 [hf_throughput]=55 [loop_overhead]=80 [decode]=50
                  [data_loader]=40 [profile]=60 [grid_throughput]=150)
GPU_TESTS=${GPU_TESTS:-tests/test_gpu.py tests/stacking/test_engine.py}
# SHARES="mfu=150 decode=90" gives benchmarks other seconds than these, e.g. when BENCH names only a few of them
for kv in ${SHARES:-}; do SHARE[${kv%%=*}]=${kv#*=}; done

mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu-session.XXXX)
START=$SECONDS
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/session.log"; }
left() { echo $((BUDGET - (SECONDS - START))); }
has() { [[ " $STAGES " == *" $1 "* ]]; }

# A stage: `run NAME SECONDS LOGFILE command...`; its exit status is logged, never fatal.
run() {
    local name=$1 limit=$2 logfile=$3
    shift 3
    if ((limit < 10)); then
        log "$name: skipped, only ${limit} s left"
        return 1
    fi
    log "$name: start (limit ${limit} s)"
    timeout --kill-after=25 "$limit" "$@" >"$logfile" 2>&1
    local rc=$?
    log "$name: exit $rc$( ((rc == 124 || rc == 137)) && echo ' (time limit)')"
    return $rc
}

if ((DRY)); then
    RESULTS=$WORK/results MARKDOWN=$WORK/BENCHMARKS.md
    BENCH_FLAGS=(--device cpu --quick --reps 1 --warmup 0 --threads 2)
else
    RESULTS=benchmarks/results/cuda MARKDOWN=docs/BENCHMARKS.md
    BENCH_FLAGS=(--device cuda)
fi

{
    echo "date: $(date -u +%FT%TZ)  host: $(hostname)  stages: $STAGES  budget: ${BUDGET}s  dry: $DRY"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 || true
    "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda',
torch.version.cuda, '| device', torch.cuda.get_device_name() if torch.cuda.is_available() else None)" 2>&1
    "$PY" -m pip list 2>/dev/null | grep -i -E '^(lightning|pytorch-lightning|transformers|triton|tokenizers|pytest-xdist|flash.attn) '
} >"$OUT/env.txt" 2>&1
log "environment in env.txt: $(head -3 "$OUT/env.txt" | tail -1)"

# ---------------------------------------------------------------------------------------------- install
if has install; then
    rm -rf "$SITE"
    # Off the GPU machine (DRY) the wheels are for another Python: install them as for 3.12, but do not use them.
    PIP_TARGET_FLAGS=()
    ((DRY)) && PIP_TARGET_FLAGS=(--python-version 3.12 --only-binary=:all:)
    run install 120 "$WORK/install.log" "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" "${PIP_TARGET_FLAGS[@]}" "$WHEELS"/*.whl
    cat "$WORK/install.log" >>"$OUT/session.log"
fi
if ((DRY)); then
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "import lit_resformer.cli, benchmarks.harness" >>"$OUT/session.log" 2>&1 \
    && log "imports: ok" || log "imports: FAILED (see session.log)"

# ---------------------------------------------------------------------------------------------- tests
bench_args() { # arguments of `python -m benchmarks` for one benchmark, its budget, results folder, markdown file
    echo "$1" "${BENCH_FLAGS[@]}" --budget-s "$2" --results-dir "$3" --markdown "$4"
}
if has tests; then
    warm_pid=
    if ((WARM)) && has bench; then
        mkdir -p "$WORK/warm"
        set -m # job control: the warm-up gets its own process group, so it can be stopped with everything it started
        (
            # loop_overhead first: it cannot shorten itself, so it gains most from compiled graphs found in the cache
            for name in $(grep -ow loop_overhead <<<"$BENCH") $(sed 's/\bloop_overhead\b//' <<<"$BENCH"); do
                [[ $name == decode ]] && continue # it takes all free GPU memory; little to compile
                "$PY" -m benchmarks $(bench_args "$name" "$((${SHARE[$name]:-60} - 25))" "$WORK/warm" \
                    "$WORK/warm/BENCHMARKS.md") --reps 1 --warmup 0
            done
        ) >"$WORK/warm.log" 2>&1 &
        warm_pid=$!
        set +m
        log "warm-up run of the benchmarks started in the background (pid $warm_pid)"
    fi
    XDIST=()
    "$PY" -c "import xdist" 2>/dev/null && XDIST=(-n 6)
    limit=$(($(left) < TESTS_S ? $(left) : TESTS_S))
    run tests "$limit" "$OUT/pytest-gpu.log" "$PY" -m pytest $GPU_TESTS -m gpu -v -rfE -p no:cacheprovider \
        --timeout 240 --junitxml "$OUT/pytest-gpu.xml" "${XDIST[@]}"
    tail -3 "$OUT/pytest-gpu.log" | tee -a "$OUT/session.log"
    if [[ -n $warm_pid ]]; then
        # its whole process group: its results are not wanted, only the compiled graphs it left in the caches
        kill -KILL -- "-$warm_pid" 2>/dev/null
        wait "$warm_pid" 2>/dev/null
        log "warm-up stopped: $(grep -c ': .*json' "$WORK/warm.log") benchmark(s) finished in it"
    fi
fi

# ---------------------------------------------------------------------------------------------- benchmarks
if has bench; then
    mkdir -p "$RESULTS"
    names=($BENCH)
    for i in "${!names[@]}"; do
        name=${names[$i]}
        rest=0
        for later in "${names[@]:$i}"; do rest=$((rest + ${SHARE[$later]:-60})); done
        # this benchmark's share, shrunk in proportion when less time is left than the remaining shares ask for
        limit=$(($(left) - 10))
        share=${SHARE[$name]:-60}
        ((rest > limit)) && share=$((share * limit / rest))
        run "bench $name" "$share" "$WORK/bench-$name.log" "$PY" -m benchmarks \
            $(bench_args "$name" "$((share - 25 > 5 ? share - 25 : 5))" "$RESULTS" "$MARKDOWN")
        grep -E '^  ' "$WORK/bench-$name.log" | tee -a "$OUT/session.log"
        grep -E 'Error|error:' "$WORK/bench-$name.log" | tail -3 | tee -a "$OUT/session.log"
    done
fi

# ---------------------------------------------------------------------------------------------- results
# one archive: every stage's log, the warm-up run, the benchmarks' JSON and the markdown with their sections
mkdir -p "$WORK/bundle"
cp "$WORK"/*.log "$WORK/bundle/" 2>/dev/null
[[ -d $WORK/warm ]] && cp -r "$WORK/warm" "$WORK/bundle/warm"
[[ -d $RESULTS ]] && cp -r "$RESULTS" "$WORK/bundle/results"
[[ -f $MARKDOWN ]] && cp "$MARKDOWN" "$WORK/bundle/BENCHMARKS.md"
tar -czf "$OUT/bench.tar.gz" -C "$WORK/bundle" .
"$PY" scripts/gpu_summary.py "$RESULTS" "$OUT/pytest-gpu.xml" >"$OUT/summary.md" 2>&1
log "done; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
cat "$OUT/summary.md"
