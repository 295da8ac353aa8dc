#!/usr/bin/env bash
# FEMNIST Table 2's columns scored per writer, with FedAvg and FedAvg(Meta) of
# the 50% and 90% columns taken from the 20% runs, nothing retrained (issue #13).
#
# Both train on all of a training client's data (`full` in
# tff_meta/data/client_data.py), and the client partition depends on the
# seed alone, so a 20% run is a 50% or 90% run up to the order of each client's
# shuffled data; only the test writers' split differs, and
# programs.evaluate --support_fraction re-splits them exactly as a run at that
# fraction does. This saves two 2,000-round cells per column and seed. Each
# FedAvg-family model is scored as its own method, or both ways where the
# seed's other cell is missing (fedavg_scoring.sh). Every other finished cell
# of the column (MAML, Meta-SGD, ...) is scored as it ran, so that
# programs.report --scores pairs all methods on the same writers:
#
#   research/queues/other_supports.sh                     # runs/fedmeta -> runs/supports
#   python -m programs.report --scores=runs/supports/p50 --reference="FedAvg(Meta)"
#   RUNS=/path/to/runs OUT=/path/to/out SUPPORTS="50 90" research/queues/other_supports.sh
#
# Writes <OUT>/p<support>/<cell>.json (programs.evaluate --markdown=false: the
# scores alone); a cell already scored is skipped. A
# variant of a cell (run folder ending in _resampled or _uniform) goes to
# <OUT>/p<support>_<variant>/, beside the column (rescored_report
# --scores=<OUT>/p90,<OUT>/p90_resampled). A cell
# trained at the column's own fraction is scored first, so it wins over one
# re-split from 20%.
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs/fedmeta}
OUT=${OUT:-runs/supports}
DATA=${DATA:-$HOME/.tff}
SUPPORTS=${SUPPORTS:-"20 50 90"}
. research/queues/fedavg_scoring.sh

score() {   # score <run> <output> [flags...]
  local run=$1 out=$2; shift 2
  if ! scorable "$run"; then echo "skip $(basename "$run") (unfinished, or no checkpoints kept)"; return; fi
  if [ -f "$out.json" ]; then echo "skip $out (scored)"; return; fi
  echo "$(date -u +%FT%TZ) $(basename "$run") -> $out"
  nice -n "${NICE:-10}" $PY -m programs.evaluate --run_dir="$run" --cache_dir="$DATA" \
    --markdown=false --output="$out" $(fedavg_flags "$RUNS" "$(basename "$run")") "$@" || echo "failed: $run"
}

for support in $SUPPORTS; do
  mkdir -p "$OUT/p$support"
  for run in "$RUNS"/table2_femnist_p"$support"_*; do
    [ -d "$run" ] || continue
    folder=$(variant_folder "$support" "$(basename "$run")")
    mkdir -p "$OUT/$folder"
    score "$run" "$OUT/$folder/$(basename "$run")"
  done
  [ "$support" = 20 ] && continue
  for run in "$RUNS"/table2_femnist_p20_fedavg*; do
    name=$(basename "$run")
    [ -d "$run" ] || continue
    score "$run" "$OUT/p$support/${name/_p20_/_p${support}_}" \
      --support_fraction="$(awk "BEGIN { print $support / 100 }")"
  done
done
