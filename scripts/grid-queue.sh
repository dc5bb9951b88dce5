#!/usr/bin/env bash
# The CPU's open science grids in the order a queue file gives, each trained seed by seed and kept as it ends
# (scripts/grid-by-seed.sh), so that a session on a machine that may be replaced resumes where the last one stopped:
#
#   nohup bash scripts/grid-queue.sh > runs/queue.log 2>&1 &      # QUEUE=docs/unfinished-grids/queue.txt
#
# A queue line is `GRID_FILE [SLICE]` (SLICE: shell-style patterns of cell names, one ladder's trunk and rungs,
# e.g. 'resformer,lr=0.001,*'); `#` starts a comment. Entries already kept are skipped without training (grid-by-seed
# finds their runs done). Every entry trains TOGETHER seeds a call (default 2: a ladder slice's two trunks side by
# side). Stops at the first entry that does not finish, with its exit code; call again to resume.
set -u -o pipefail
QUEUE=${QUEUE:-docs/unfinished-grids/queue.txt}
export TOGETHER=${TOGETHER:-2}
[[ -f $QUEUE ]] || { echo "no queue file $QUEUE"; exit 2; }
here=$(dirname "$0")
while read -r grid slice; do
    [[ -z $grid || $grid == \#* ]] && continue
    read -r slice <<<"${slice%%#*}"  # without a trailing comment and its blanks
    echo "[$(date -u +%FT%TZ)] queue: $grid${slice:+ (slice $slice)}"
    GRID=$grid SLICE=$slice bash "$here/grid-by-seed.sh" < /dev/null
    status=$?
    ((status == 0)) || { echo "[$(date -u +%FT%TZ)] queue: $grid stopped with exit $status"; exit "$status"; }
done < "$QUEUE"
echo "[$(date -u +%FT%TZ)] queue: every entry of $QUEUE done"
