#!/usr/bin/env bash
# FEMNIST Table 2 on writers the runs never saw (issue #13: "choices that only
# suit the 105 shared writers will show there"). Every finished FEMNIST cell
# that kept its checkpoints is scored, with nothing retrained, on all clients
# of another FEMNIST set - by default LEAF's 31 writers in
# a LEAF FEMNIST folder (OTHERS), none of whom is in TFF's file - each split into
# support and query by the cell's own support fraction and seed, and adapted
# as the cell adapts its test writers (programs.evaluate --clients_from).
# FedAvg and FedAvg(Meta) cells are scored as their own methods, or one
# model both ways where the seed's other cell is missing (fedavg_scoring.sh).
#
#   research/queues/other_writers.sh                       # runs/fedmeta -> runs/other_writers
#   RUNS=/path/to/runs OTHERS=leaf_femnist:/my/leaf/femnist research/queues/other_writers.sh
#
# The 20% cells go to <OUT>; the other columns and variants of a cell to
# <OUT>_p<support>[_<variant>] (fedavg_scoring.sh's variant_folder), one folder
# per set of clients and variant, as programs.report --scores reads them.
# A cell already scored (its <OUT>/<cell>.json) is skipped; per-client
# accuracies are in the JSON, so two cells of one seed pair on the same writers.
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs/fedmeta}
OUT=${OUT:-runs/other_writers}
DATA=${DATA:-$HOME/.tff}
OTHERS=${OTHERS:-leaf_femnist:<leaf femnist folder>}
. research/queues/fedavg_scoring.sh
mkdir -p "$OUT"
for run in "$RUNS"/table2_femnist_p*; do
  name=$(basename "$run")
  if ! scorable "$run"; then echo "skip $name (unfinished, or no checkpoints kept)"; continue; fi
  support=${name#table2_femnist_p}; support=${support%%_*}
  folder=$(variant_folder "$support" "$name")
  [ "$folder" = p20 ] && dest=$OUT || dest=${OUT}_$folder   # 20%, as trained: OUT itself
  if [ -f "$dest/$name.json" ]; then echo "skip $name (scored)"; continue; fi
  mkdir -p "$dest"
  echo "$(date -u +%FT%TZ) $name"
  nice -n "${NICE:-10}" $PY -m programs.evaluate --run_dir="$run" --cache_dir="$DATA" \
    --clients_from="$OTHERS" --markdown=false --output="$dest/$name" $(fedavg_flags "$RUNS" "$name") \
    || echo "failed: $name"
done
