#!/usr/bin/env bash
# The CPU evidence tier (configs/grids/evidence/README.md), grid after grid, unattended:
#
#   nohup bash scripts/evidence.sh > runs/evidence.log 2>&1 &  # or GRIDS="fig7 fig9" bash scripts/evidence.sh
#   bash scripts/evidence.sh --list                               # the grids it would run, in order
#
# A name in GRIDS is a figure of configs/grids/evidence/ (trained as <figure>-evidence) or a grid file of its own
# at the same budget (configs/grids/value-path.yaml, whose vanilla and ResFormer are fig7-evidence's runs).
# The grids in ANALYZE also get the attention analysis of every finished run (`grid --analyze`): their claims on
# the mechanism (Figs. 1, 2, 12) are judged on it.
#
# Each grid trains into $RUNS (two one-thread runs side by side by default; runs another grid already finished with
# the same config are shared, not trained again), then its finished runs are exported (configs, summaries, metrics;
# no checkpoints) and merged into $RESULTS/<grid>/, whose report is rewritten there: what to commit. Calling it again
# resumes: finished runs are skipped, interrupted ones resume from their last checkpoint, merged runs are kept.
# $TIME_LIMIT (seconds, optional) bounds the whole call: no run starts after it and running ones are stopped for the
# next call to resume.
set -u -o pipefail
shopt -s nullglob  # a glob that matches no file names nothing
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
RUNS=${RUNS:-runs}
RESULTS=${RESULTS:-docs/results}
SLOTS=${SLOTS:-2}
THREADS=${THREADS:-1}
# The order configs/grids/evidence/README.md states; value-path (the value-path variants beyond the paper, 30 runs
# of its own) before fig11: one more grid that can be finished and committed in a working session, where the
# figures after it run on into the next ones. A figure of configs/grids/evidence/ the order does not name runs after
# these (tests/grids/test_grid_tiers.py checks that the order names only the tier's files, each once).
ORDER="fig7 fig9 configs/grids/value-path.yaml fig11 fig8 fig10 fig13 fig16 fig5 fig17 learnable fig7-lengths fig14"
every_grid() {
    local file names=" $ORDER "
    echo -n "$ORDER"
    for file in configs/grids/evidence/*.yaml; do
        [[ $names == *" $(basename "$file" .yaml) "* ]] || echo -n " $(basename "$file" .yaml)"
    done
}
GRIDS=${GRIDS:-$(every_grid)}
if [[ ${1:-} == --list ]]; then  # the grids a call would run, in order, and nothing else
    echo "$GRIDS"
    exit 0
fi
ANALYZE=${ANALYZE:-fig7}
CODE_CORPUS=/tmp/lit-resformer-code-corpus  # fig14's corpus (configs/data/code-corpus.yaml's path)
BIN=${BIN:-$(dirname "$(command -v python)")}
CLI=${CLI:-$BIN/lit-resformer}
START=$SECONDS

log() { echo "[$(date -u +%FT%TZ)] $*"; }

# A fresh machine starts from the committed results: every finished run of the tier is skipped, and shared by the
# grids that ask for the same run (the runner links runs with the same config across the runs folder).
mkdir -p "$RUNS"
for done in "$RESULTS"/*-evidence "$RESULTS"/value-path; do
    [[ -d $done && ! -e $RUNS/$(basename "$done") ]] && cp -r "$done" "$RUNS/" && log "seeded $RUNS/$(basename "$done") from $done"
done

for figure in $GRIDS; do
    if [[ $figure == *.yaml ]]; then
        file=$figure
        name=$("$BIN/python" -c "import sys, yaml, pathlib; p = pathlib.Path(sys.argv[1]); print(yaml.safe_load(p.read_text()).get('name', p.stem))" "$file")
    else
        file=configs/grids/evidence/$figure.yaml
        name=$figure-evidence
    fi
    extra=()
    [[ " $ANALYZE " == *" $figure "* ]] && extra=(--analyze)
    limit=()
    if [[ -n ${TIME_LIMIT:-} ]]; then
        left=$((TIME_LIMIT - (SECONDS - START)))
        ((left > 60)) || { log "time limit reached before $name"; exit 75; }
        limit=(--time-limit "$left")
    fi
    if [[ $figure == fig14 ]]; then  # a corpus larger than the embedded one, within one epoch (reused when intact)
        "$CLI" prepare-corpus "$CODE_CORPUS" --max-chars 150000000 || exit 1
    fi
    log "$name: start"
    "$CLI" grid "$file" --runs-dir "$RUNS" --cpu-slots "$SLOTS" --threads-per-run "$THREADS" "${extra[@]}" "${limit[@]}"
    status=$?
    log "$name: runner exit $status"
    "$CLI" export-results "$RUNS/$name" --out "$RUNS/.exports" --note "CPU evidence tier, $(nproc) cores" \
        && "$CLI" merge-results "$RUNS/.exports/$name.tar.gz" "$RESULTS" \
        && "$CLI" report "$RESULTS/$name" >/dev/null \
        && log "$name: results in $RESULTS/$name"
    ((status == 0)) || { log "$name: not finished (exit $status); call again to resume"; exit "$status"; }
done
log "every grid finished"
