#!/usr/bin/env bash
# A CPU grid longer than a working session, on a machine that may be replaced between sessions, trained one seed at
# a time so that what is kept is whole seeds:
#
#   GRID=configs/grids/transfer/budget-ladder.yaml nohup bash scripts/grid-by-seed.sh > runs/by-seed.log 2>&1 &
#
# 1. seeds the runs folder with the seeds already kept in $KEPT/<grid>/ (finished runs: configs, summaries,
#    metrics; no checkpoints), so a new machine starts at the first seed not kept;
# 2. trains seed k (or the next $TOGETHER seeds) with `lit-resformer grid --seeds <the seeds up to k>`: the earlier seeds' runs are skipped, and the
#    folder's manifest names every seed it holds. A ladder's rungs start from their trunk's checkpoints, which live
#    only in the runs folder, so a seed's trunks and rungs finish on one machine; a call stopped with the session
#    resumes from the last checkpoint when called again on the same machine;
# 3. once every run up to seed k is done, exports them and merges them into $KEPT/<grid>/: commit that folder then,
#    before the machine can go;
# 4. after the last seed (the grid's whole seed list), exports the grid into $RESULTS/<grid>/ and writes its report:
#    commit it with its RESULTS section and remove $KEPT/<grid>/ (the board reads $RESULTS only, so a grid's claims
#    are judged once, on all its seeds). A grid whose seeds are all in $RESULTS already is left alone.
# Exit code: 0 every seed done, else the runner's (1 runs failed, 2 the grid could not run, 130 interrupted), or 1
# when runs of a seed are left unfinished (a rung whose trunk has no checkpoint here: train that seed again).
set -u -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
GRID=${GRID:?name the grid file: GRID=configs/grids/transfer/budget-ladder.yaml}
RUNS=${RUNS:-runs}
KEPT=${KEPT:-docs/unfinished-grids}
RESULTS=${RESULTS:-docs/results}
SLOTS=${SLOTS:-2}
THREADS=${THREADS:-1}
# Seeds trained in one call: 2 keeps both slots busy on a grid where one seed has a single run to train at a time (a
# ladder whose other arm is shared: its rungs wait for the one trunk); each is kept once the call ends.
TOGETHER=${TOGETHER:-1}
# A slice of the grid: shell-style patterns of cell names (`grid --cells`), e.g. SLICE='resformer,lr=0.001,*' for one
# ladder's trunk and rungs; only they train and count, and the grid reaches $RESULTS from a call without SLICE.
read -r -a SLICE_PATTERNS <<<"${SLICE:-}"
SLICE_ARGS=()
((${#SLICE_PATTERNS[@]} == 0)) || SLICE_ARGS=(--cells "${SLICE_PATTERNS[@]}")
PY=${PYTHON:-$(command -v python)}
CLI=${CLI:-$(dirname "$PY")/lit-resformer}
NOTE=${NOTE:-"CPU, $(nproc) cores, seed by seed (scripts/grid-by-seed.sh)"}

log() { echo "[$(date -u +%FT%TZ)] $*"; }

# The grid's name, cells and seeds as the runner reads the file (extends, ladder rungs and all).
IFS=$'\t' read -r NAME FILE_SEEDS CELLS < <("$PY" -c "
import sys
from lit_resformer.grids import load_grid
grid = load_grid(sys.argv[1])
print(grid.name, ','.join(map(str, grid.seeds)), *(c.name for c in grid.cells), sep='\\t')" "$GRID") \
    || { log "cannot read $GRID"; exit 2; }
SEEDS=${SEEDS:-${FILE_SEEDS//,/ }}
IFS=$'\t' read -r -a CELL_LIST <<<"$CELLS"  # a cell's name may hold commas

in_slice() {  # whether cell $1 is in the slice (every cell without SLICE)
    local pattern
    ((${#SLICE_PATTERNS[@]} == 0)) && return 0
    for pattern in "${SLICE_PATTERNS[@]}"; do
        # shellcheck disable=SC2053  # the pattern is a glob on purpose
        [[ $1 == $pattern ]] && return 0
    done
    return 1
}

# How many of the grid's cells (of the slice) are not done at seed $1 in folder $2.
unfinished() {
    local cell left=0
    for cell in "${CELL_LIST[@]}"; do
        in_slice "$cell" || continue
        grep -qs '"status": "done"' "$2/$cell/seed$1/summary.json" || ((left += 1))
    done
    echo "$left"
}

read -r -a SEED_LIST <<<"$SEEDS"
# A grid (or slice) already whole in $RESULTS has landed: its kept folder was removed then, and keeping its seeds
# again would bring that folder back (and the links of the grids that share its runs would point into it).
landed=1
for seed in "${SEED_LIST[@]}"; do (($(unfinished "$seed" "$RESULTS/$NAME") == 0)) || landed=0; done
if ((landed)); then
    log "$NAME: seeds ${SEED_LIST[*]}${SLICE:+ of the cells $SLICE} already in $RESULTS/$NAME; nothing to train or keep"
    exit 0
fi

mkdir -p "$RUNS" "$KEPT"
if [[ -d $KEPT/$NAME ]]; then
    # never over a run of this folder: one already here (trained here, or a link to a shared grid's run) stays as is
    mkdir -p "$RUNS/$NAME"
    for kept_file in "$KEPT/$NAME"/*; do  # grid.yaml, provenance.json (cell folders' names may hold dots: 0.002)
        [[ -f $kept_file ]] && cp -n "$kept_file" "$RUNS/$NAME/"
    done
    for kept_run in "$KEPT/$NAME"/*/seed*/; do
        run=$RUNS/$NAME/${kept_run#"$KEPT/$NAME/"} && run=${run%/}
        [[ -e $run || -L $run || ! -d $kept_run ]] || { mkdir -p "${run%/*}" && cp -r "$kept_run" "$run"; }
    done
    log "seeded $RUNS/$NAME with the kept runs of $KEPT/$NAME"
fi

export_into() {  # export the runs folder's finished runs of the grid and merge them into folder $1
    "$CLI" export-results "$RUNS/$NAME" --out "$RUNS/.exports" --note "$NOTE" >/dev/null \
        && "$CLI" merge-results "$RUNS/.exports/$NAME.tar.gz" "$1" >/dev/null
}

SLICE_SIZE=0
for cell in "${CELL_LIST[@]}"; do in_slice "$cell" && ((SLICE_SIZE += 1)); done
done_seeds=()
for ((first = 0; first < ${#SEED_LIST[@]}; first += TOGETHER)); do
    batch=("${SEED_LIST[@]:first:TOGETHER}")
    done_seeds+=("${batch[@]}")
    left=0
    for seed in "${batch[@]}"; do ((left += $(unfinished "$seed" "$RUNS/$NAME"))); done
    if ((left > 0)); then
        log "$NAME seed(s) ${batch[*]}: training ($left of $((SLICE_SIZE * ${#batch[@]})) runs left)"
        "$CLI" grid "$GRID" --runs-dir "$RUNS" --cpu-slots "$SLOTS" --threads-per-run "$THREADS" \
            --seeds "${done_seeds[@]}" --no-report "${SLICE_ARGS[@]}"
        status=$?
        ((status == 0)) || { log "$NAME seed(s) ${batch[*]}: runner exit $status; call again to resume"; exit "$status"; }
        for seed in "${batch[@]}"; do
            left=$(unfinished "$seed" "$RUNS/$NAME")
            ((left == 0)) || { log "$NAME seed $seed: $left run(s) could not start here; train this seed again"; exit 1; }
        done
    fi
    left=0
    for seed in "${batch[@]}"; do ((left += $(unfinished "$seed" "$KEPT/$NAME"))); done
    if ((left > 0)); then
        export_into "$KEPT" || { log "$NAME seed(s) ${batch[*]}: export into $KEPT failed"; exit 1; }
        log "$NAME seed(s) ${batch[*]}: kept in $KEPT/$NAME (commit it)"
    fi
done

if [[ -n ${SLICE:-} || "${done_seeds[*]}" != "${FILE_SEEDS//,/ }" ]]; then
    log "$NAME: seeds ${done_seeds[*]} kept${SLICE:+ of the cells $SLICE}; the grid's seeds are ${FILE_SEEDS//,/ }"
    exit 0
fi
export_into "$RESULTS" && "$CLI" report "$RESULTS/$NAME" >/dev/null \
    || { log "$NAME: export into $RESULTS failed"; exit 1; }
log "$NAME: every seed done, results in $RESULTS/$NAME: commit them and remove $KEPT/$NAME"
