#!/usr/bin/env bash
# The CPU evidence tier's longest grid on a lent GPU, in one command of at most ~9.5 minutes:
#
#   bash scripts/gpu-evidence.sh          # then on the machine that keeps the results, as scripts/gpu-grids.sh says
#
# fig14-evidence (12 runs of 10,000 steps, about 7 hours on the 2-core machine) trains as one slice of
# scripts/gpu-grids.sh, every run side by side on the GPU, with the CPU tier's own configs (fp32; where a run
# trained does not change what it is, so the CPU runner skips what finished here). Its corpus is this machine's
# installed Python sources at the size the grid's header names (CODE_CHARS), built here.
# A probe reads the runs' logged steps twice, PROBE_GAP_S apart, once every run has logged: if the slowest cannot
# reach max_steps before the slice's time limit, the runs are stopped (a run stopped unfinished is never exported)
# and the rest of the budget trains FALLBACK (grid files; none by default: the slice then ends and saves the device
# time), so the device time can buy one finished grid either way. A fallback should share no run with a CPU grid:
# the embedded corpus's code half is the running Python's standard library, so a GPU run paired with a CPU run
# would compare two corpora. Everything lands in $OUT as gpu-grids.sh leaves it (exports.tar, logs.tar.gz) plus
# probe.log.
# Measured on an H200 (2026-11-26): 12 runs side by side make 25 steps/s each (~300 a second in all), so fig14's
# 120,000 steps take ~400 s after its data (the corpus, a 4k BPE, the token caches: ~150 s with the tokenizer on one
# thread, since then run on all cores): the grid fits one 10-minute call only just.
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-evidence}
BUDGET=${BUDGET:-585}
MARGIN=${MARGIN:-50}          # after the runners' limit: stopping, one export process, the archives
GRID=${GRID:-configs/grids/evidence/fig14.yaml}
CODE_CHARS=${CODE_CHARS:-150000000}
FALLBACK=${FALLBACK:-}
FALLBACK_SHARES=${FALLBACK_SHARES:-}  # committed grids whose runs the fallback shares (not trained again)
PROBE_GAP_S=${PROBE_GAP_S:-30}
RUNS=${RUNS:-/tmp/runs}
PY=${PYTHON:-python3}
export OUT RUNS PYTHON=$PY MARGIN
START=$SECONDS
mkdir -p "$OUT"
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/probe.log"; }

# Logged steps of every run of a grid folder: "<runs logging> <slowest run's step> <max_steps>"
steps() {
    "$PY" - "$RUNS/$1" <<'EOF'
import csv, sys, pathlib, yaml
steps, max_steps = [], None
for seed in sorted(pathlib.Path(sys.argv[1]).glob("*/seed*")):
    logged = [int(r["step"]) for f in seed.glob("csv/version_*/metrics.csv") for r in csv.DictReader(open(f))
              if r.get("step")]
    if (seed / "config.yaml").is_file():
        max_steps = yaml.safe_load((seed / "config.yaml").read_text())["trainer"]["max_steps"]
    steps.append(max(logged, default=0))
print(sum(s > 0 for s in steps), len(steps), min(steps, default=0), max_steps or 0)
EOF
}

name=$(basename "$GRID" .yaml)-evidence
GRIDS=$GRID BUDGET=$BUDGET PREPARE=grids CODE_CHARS=$CODE_CHARS RUNS_PER_GPU=${RUNS_PER_GPU:-16} PARALLEL=1 \
    setsid bash scripts/gpu-grids.sh &
slice=$!
limit=$((BUDGET - MARGIN))   # the second the runner stops its runs (gpu-grids.sh's --time-limit)
verdict=""
while kill -0 "$slice" 2>/dev/null && [[ -z $verdict ]]; do
    sleep 5
    read -r logging total first max_steps < <(steps "$name")
    ((total > 0 && logging == total)) || continue
    t1=$SECONDS
    sleep "$PROBE_GAP_S"
    read -r _ _ second _ < <(steps "$name")
    rate=$(((second - first) * 1000 / (SECONDS - t1)))  # steps a second, x1000, of the slowest run
    finish=$((rate > 0 ? SECONDS - START + (max_steps - second) * 1000 / rate : 1000000))
    log "$name: $total runs, slowest at step $second of $max_steps, $((rate / 1000)).$((rate % 1000 / 100)) steps/s: done at ~${finish}s (limit ${limit}s)"
    if ((finish <= limit)); then verdict=continue; else verdict=fallback; fi
done
if [[ $verdict == fallback ]]; then
    log "$name cannot finish in this slice: stopped; ${FALLBACK:-nothing} instead"
    kill -TERM -- -"$slice" 2>/dev/null
    wait "$slice"
    rm -rf "${RUNS:?}/$name"
    [[ -n $FALLBACK ]] || { log "done"; exit 0; }
    for shared in $FALLBACK_SHARES; do cp -r "docs/results/$shared" "$RUNS/" 2>/dev/null; done
    GRIDS=$FALLBACK BUDGET=$((BUDGET - (SECONDS - START))) PREPARE=grids RUNS_PER_GPU=${RUNS_PER_GPU:-16} PARALLEL=1 \
        bash scripts/gpu-grids.sh
else
    wait "$slice"
fi
log "done"
