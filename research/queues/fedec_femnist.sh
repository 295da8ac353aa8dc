#!/usr/bin/env bash
# FedEC Table 2, the FEMNIST (150, 3) column (issue #66): every method of
# configs/fedec/femnist_150_3.toml at seeds 0, 1 and 2, one programs.train run per cell, into the
# layout docs/RESULTS.md §4 reads (`<OUT>/fedec_femnist_150_3/seed<s>/<algorithm>/`; copy that
# folder to docs/runs/ without checkpoints/, client_states/ and tensorboard/, then
# `python -m tff_meta.analysis.results_page --write`).
#
# DATA is a folder holding a TFF-format emnist_all.sqlite. The (150, 3) label shards pool the
# digits of every writer in it: TFF's 105-writer file gives 11,776 digits (about 78 a client,
# 8 of them local test), a 308-writer file (TFF's 105, LEAF's 31 and 172 more LEAF writers)
# 33,049, near the paper's 34,674 (FedEC Table 1); docs/RESULTS.md §4 says which one ran.
#
#   DATA=<folder of emnist_all.sqlite> OUT=<runs folder> \
#     nohup research/queues/fedec_femnist.sh > <runs folder>/fedec_queue.log 2>&1 &
#   OUT=<runs folder> research/queues/fedec_femnist.sh status
#
# Resumable: start the same command again after a kill or a reboot; a cell resumes from its last
# checkpoint (every 10 rounds), a finished cell (DONE) is skipped, a failed one is logged and the
# queue goes on. At most SLOTS cells run at once over every queue that shares OUT (default 2, one
# a core; research/queues/table2_femnist.sh takes the same <OUT>/.slots): a cell waits for a
# free slot (<OUT>/.slots/<n>, holding its lane's PID; a dead holder's slot is taken over); each
# cell is taken by one lane (<cell>.lock). Everything runs at nice NICE (default 19).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:?set OUT to the runs folder, outside the repository}
CONFIG=${CONFIG:-configs/fedec/femnist_150_3.toml}
NAME=$(basename "$CONFIG" .toml)
ALGORITHMS=${ALGORITHMS:-"fedec fedec_l2 reptile fedper fedrep fedavg local_only scaffold pfedme lg_fedavg apfl per_fedavg_fo ditto fedprox"}
SEEDS=${SEEDS:-"0 1 2"}
SLOTS=${SLOTS:-2}
NICE=${NICE:-19}
EXTRA=${EXTRA:-}   # more flags for every run, e.g. a smoke test's "--rounds=2 --eval_every=1"
ROOT="$OUT/fedec_$NAME"
. research/queues/slots.sh   # locks, shared slots, train, lanes

cells() {   # one line per cell, "<seed> <algorithm>": seed 0's column first
  local seed algorithm
  for seed in $SEEDS; do for algorithm in $ALGORITHMS; do echo "$seed $algorithm"; done; done
}

cell() {   # cell <seed> <algorithm>: one training, DONE when it exits 0
  local seed=$1 algorithm=$2
  local folder="$ROOT/seed$seed/$algorithm" status
  mkdir -p "$ROOT/seed$seed"
  claim "$folder" || return 0   # done, or another lane has it
  local held; held=$(slot)
  train "seed$seed/$algorithm" "$folder" "$CONFIG" "$seed" --algorithm="$algorithm"; status=$?
  [ $status -eq 0 ] && touch "$folder/DONE"
  log "done seed$seed/$algorithm (exit $status; $folder.log)"
  rm -rf "$held" "$folder.lock"
}

show() {   # show <seed> <algorithm>: the rounds a cell has logged, and its state
  local folder="$ROOT/seed$1/$2" state
  [ -d "$folder" ] || { echo "seed$1/$2: not started"; return 0; }
  state=$(state "$folder")
  [ "$state" = done ] || { [ -d "$folder.lock" ] && state=running || state=stopped; }
  echo "seed$1/$2: round $(rounds "$folder"), $state"
}
if [ "${1:-}" = status ]; then each_cell show; exit 0; fi
DATA=${DATA:?set DATA to the folder holding emnist_all.sqlite}
mkdir -p "$OUT/.slots" "$ROOT"

run_lanes
