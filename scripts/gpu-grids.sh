#!/usr/bin/env bash
# One time-bounded slice of ablation grids on an offline GPU machine (a lent GPU for ten minutes, a Slurm job with
# a wall-time limit), in one command:
#
#   GRIDS="configs/grids/repro/fig7.yaml configs/grids/repro/fig9.yaml" bash scripts/gpu-grids.sh
#
# 1. installs the carried wheels ($WHEELS, default .whl; see scripts/fetch-wheels.sh) into $SITE without touching
#    the machine's PyTorch, and runs the project from this source tree (PYTHONPATH);
# 2. seeds a runs folder with the runs already finished in earlier slices (docs/results/<grid>/, merged there by
#    `lit-resformer merge-results`) and with a CPU grid's seeds kept so far ($KEPT/<grid>/, default
#    docs/unfinished-grids: scripts/grid-by-seed.sh), so that nothing is trained twice;
# 3. runs up to $PARALLEL grids at once, each with `--runs-per-gpu $RUNS_PER_GPU` (small runs share the GPU),
#    `--stack $STACK` (runs of one recipe and model shape trained in one process, stacked into one model and
#    stepped as one CUDA graph: `STACK=auto` packs as many as the GPU's memory holds, best with RUNS_PER_GPU=1 and
#    PARALLEL=1; the default 1 trains one run a process) and `--time-limit` so that every runner stops $MARGIN
#    seconds before $BUDGET: running runs are stopped and left for the next slice, which starts them again (their
#    results are never exported);
# 4. exports every grid's finished runs (configs, summaries, metrics; no checkpoints) into $OUT/exports.tar,
#    one <grid>.tar.gz each, plus the runners' logs in $OUT/logs.tar.gz.
# On the machine that keeps the results:  tar -xf exports.tar -C /tmp/x && for f in /tmp/x/*.tar.gz; do
#   lit-resformer merge-results $f docs/results; done   then  lit-resformer report docs/results/<grid>,
#   lit-resformer claims docs/results
#
# SET holds `--set` overrides for every cell (default: train on the GPU); CPU-tier grids keep their fp32 recipe.
# GRID_ARGS holds more arguments for every runner: `--analyze` for a grid whose claims read the attention analysis
# (it needs the checkpoints, which stay on this machine; the analysis results are exported with the runs).
# A grid on the pinned corpus (configs/data/pinned.yaml) needs its shard, which an offline machine cannot build:
# carry it in $PINNED_SHARDS (default .pinned/; `python -m lit_resformer.corpora.pinned_corpus build --out .pinned/`,
# 27 MiB) and it is copied into the cache first.
set -u -o pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-$PWD/gpu-grids}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
RUNS=${RUNS:-/tmp/runs}
RESULTS=${RESULTS:-docs/results}
KEPT=${KEPT:-docs/unfinished-grids}
BUDGET=${BUDGET:-540}
# left after the runners' time limit: stopping runs (up to 30 s of grace), one export process (~20 s to import on a
# bare machine), the archives
MARGIN=${MARGIN:-75}
PARALLEL=${PARALLEL:-4}
RUNS_PER_GPU=${RUNS_PER_GPU:-4}
STACK=${STACK:-1}
SET=${SET:-trainer.accelerator=gpu}
PY=${PYTHON:-python3}
GRIDS=${GRIDS:?name the grid files: GRIDS="configs/grids/repro/fig7.yaml ..."}
GRID_ARGS=${GRID_ARGS:-}
PINNED_SHARDS=${PINNED_SHARDS:-.pinned}
export LIT_RESFORMER_CACHE=${LIT_RESFORMER_CACHE:-/tmp/lit-resformer-cache}

START=$SECONDS
mkdir -p "$OUT" "$RUNS" "$OUT/.logs"
log() { echo "[$((SECONDS - START))s] $*" | tee -a "$OUT/.logs/slice.log"; }

if [[ -d $WHEELS ]] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$WHEELS"/*.whl >"$OUT/.logs/install.log" 2>&1 || log "install: FAILED (see install.log)"
    export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
# no console script where the project is not installed: the runner starts training through the module
export LIT_RESFORMER_TRAIN_CMD=${LIT_RESFORMER_TRAIN_CMD:-"$PY -m lit_resformer.cli fit"}
log "$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo 'no GPU')"

set_args=()
for kv in $SET; do set_args+=(--set "$kv"); done

grid_name() { "$PY" -c "import sys, yaml, pathlib; p = pathlib.Path(sys.argv[1]); print(yaml.safe_load(p.read_text()).get('name', p.stem))" "$1"; }

# the runs finished in earlier slices, and the seeds a CPU grid kept seed by seed (scripts/grid-by-seed.sh): the
# runner skips them (same config, summary done)
for grid in $GRIDS; do
    name=$(grid_name "$grid")
    for done in "$RESULTS/$name" "$KEPT/$name"; do
        if [[ -d $done ]]; then
            cp -rn "$done" "$RUNS/" && log "$name: seeded with $(ls -d "$done"/*/seed*/ 2>/dev/null | wc -l) finished run(s) of $done"
        fi
    done
done

if ls "$PINNED_SHARDS"/pinned-*.corpus.xz >/dev/null 2>&1; then
    mkdir -p "$LIT_RESFORMER_CACHE/pinned" && cp "$PINNED_SHARDS"/pinned-*.corpus.xz "$LIT_RESFORMER_CACHE/pinned/"
    log "pinned corpus shard(s) copied into the cache: $(ls "$PINNED_SHARDS"/pinned-*.corpus.xz)"
fi

# The data, built once before the concurrent runners (they would otherwise all wait on its lock):
#   PREPARE=embedded  the embedded corpus's 4k BPE and token caches (the CPU tier's data; default)
#   PREPARE=code      the GPU tier's corpus: this machine's installed Python sources (lit-resformer prepare-corpus,
#                     CODE_CHARS characters), its 32k BPE and the 2,048-token caches (configs/data/code-corpus.yaml)
#   PREPARE=grids     the data of every cell of the grids named, each distinct data section once (tokenizer, token
#                     and packed caches, the bigram counts of the evidence gate); with CODE_CHARS set, the code
#                     corpus of that many characters first (a grid on it names the size in its header)
#   PREPARE=none      nothing
CODE_CORPUS=${CODE_CORPUS:-/tmp/lit-resformer-code-corpus}
case ${PREPARE:-embedded} in
    grids)
        if [[ -n ${CODE_CHARS:-} ]]; then
            "$PY" -m lit_resformer.corpora.code_corpus "$CODE_CORPUS" --max-chars "$CODE_CHARS" 2>&1 | tee -a "$OUT/.logs/slice.log"
        fi
        prepare="import json, sys
from lit_resformer.grids.spec import load_grid
from lit_resformer.data import LMDataModule
sections = {json.dumps(c['data'], sort_keys=True, default=str): c['data']
            for grid in sys.argv[1:] for c in load_grid(grid).configs.values()}
for data in sections.values():
    module = LMDataModule(**data)
    module.prepare_data()
    module.train_bigram_counts()
    print('prepared', data, flush=True)" ;;
    embedded) prepare="from lit_resformer.data import LMDataModule
LMDataModule(source='embedded', tokenizer='bpe', bpe_vocab_size=4096, seq_len=256).prepare_data()" ;;
    code)
        "$PY" -m lit_resformer.corpora.code_corpus "$CODE_CORPUS" --max-chars "${CODE_CHARS:-250000000}" \
            2>&1 | tee -a "$OUT/.logs/slice.log"
        prepare="from lit_resformer.data import LMDataModule
LMDataModule(source='local', path='$CODE_CORPUS/python.jsonl', tokenizer='bpe', bpe_vocab_size=32768, seq_len=2048,
             holdout_fraction=0.01).prepare_data()" ;;
    none) prepare= ;;
    *) log "PREPARE=${PREPARE} is not one of: embedded code grids none"; exit 2 ;;
esac
if [[ -n $prepare ]]; then
    # the tokenizer on every core here (no runs are forked from this process; the runs keep it on one thread)
    TOKENIZERS_PARALLELISM=true "$PY" -c "$prepare" $GRIDS >"$OUT/.logs/prepare.log" 2>&1 \
        || log "data preparation failed (see prepare.log)"
    log "data prepared (${PREPARE:-embedded})"
fi

# the idle card's bf16 matmul peak, before the runs share it: every run records it, and the reports state MFU against
# it beside the datasheet's (lit_resformer.provenance)
if peak=$("$PY" -m lit_resformer.provenance --measure-peak 2>>"$OUT/.logs/slice.log"); then
    export LIT_RESFORMER_MEASURED_PEAK_FLOPS=$peak
    log "measured bf16 matmul peak: $peak FLOP/s"
fi

one_grid() {
    local grid=$1 name
    name=$(grid_name "$grid")
    local limit=$((BUDGET - MARGIN - (SECONDS - START)))
    if ((limit < 30)); then
        echo "[$((SECONDS - START))s] $name: not started, ${limit} s left" >>"$OUT/.logs/slice.log"
        return 0
    fi
    "$PY" -m lit_resformer.cli grid "$grid" --runs-dir "$RUNS" --no-report --runs-per-gpu "$RUNS_PER_GPU" \
        --stack "$STACK" --time-limit "$limit" "${set_args[@]}" $GRID_ARGS >"$OUT/.logs/$name.log" 2>&1
    echo "[$((SECONDS - START))s] $name: runner exit $? ($(grep -c '' "$OUT/.logs/$name.log") log lines)" >>"$OUT/.logs/slice.log"
}
export -f one_grid grid_name
export PY RUNS RUNS_PER_GPU STACK BUDGET MARGIN START OUT GRID_ARGS
export SET_ARGS="${set_args[*]}"
# xargs runs the grids $PARALLEL at a time; each runner stops itself at its time limit
printf '%s\n' $GRIDS | xargs -P "$PARALLEL" -I{} bash -c 'set_args=($SET_ARGS); one_grid "$@"' _ {}
log "runners finished"

mkdir -p "$OUT/.exports"
grid_dirs=()
for grid in $GRIDS; do
    name=$(grid_name "$grid")
    [[ -d $RUNS/$name ]] && grid_dirs+=("$RUNS/$name")
done
# one process for all grids (importing torch on a bare machine takes ~20 s)
((${#grid_dirs[@]})) && "$PY" -m lit_resformer.cli export-results "${grid_dirs[@]}" --out "$OUT/.exports" \
    --note "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo CPU), slice of $(date -u +%FT%TZ)" \
    2>&1 | tee -a "$OUT/.logs/slice.log"
tar -cf "$OUT/exports.tar" -C "$OUT/.exports" .
tar -czf "$OUT/logs.tar.gz" -C "$OUT/.logs" .
rm -rf "$OUT/.exports" "$OUT/.logs"
echo "slice done in $((SECONDS - START)) s; $OUT: $(ls "$OUT" | tr '\n' ' ')"
