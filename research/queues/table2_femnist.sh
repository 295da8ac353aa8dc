#!/usr/bin/env bash
# FedMeta Table 2 on FEMNIST, every cell a real run at seeds 0, 1 and 2 (issue #65), at the
# paper's protocol: 2,000 rounds, 4 clients a round, support and query sets drawn afresh each
# round (Algorithm 1, line 13; `resample_support = true` in configs/fedmeta/table2_femnist_*).
#
# Run it from a worktree pinned to a tag, with the run folders outside the repository:
#
#   git worktree add ../tff_meta_<tag> <tag> && cd ../tff_meta_<tag> && make setup
#   DATA=<folder of emnist_all.sqlite> OUT=<runs folder> \
#     nohup research/queues/table2_femnist.sh > <runs folder>/queue.log 2>&1 &
#   METHODS="metasgd" ... (the same from another tag's worktree, the same OUT)
#
# Cells, in order: the 20% column first (FedAvg, FedMeta(MAML)) for seeds 0, 1, 2, then MAML at
# 50% and 90%, then FOMAML at 20% (Fig. 3's cost), each for the methods in METHODS.
# FedAvg and FedAvg(Meta) train the same model (the paper's FedAvg(Meta) only fine-tunes at
# test time; both read all of a training client's data), so FedAvg is trained once per seed,
# at 20%, and that run is scored both ways at 20%, 50% and 90% (programs.evaluate
# --finetune_epochs=0,1 --support_fraction=p re-splits the test writers as a run at p does).
# Every other cell is scored at its own fraction. Scores: <OUT>/scores/p<support>/<cell>.json,
# per test writer, for programs.report --scores.
#
# Cost measured on this project's 2-core machine (the queue's first cells, 308 writers, two
# cells at once, at nice 19 beside other work; metrics.csv round_seconds, worker_rss_mb):
# FedAvg 1.7 s and FedMeta(MAML) 1.2 s a round over rounds 400-550 at load 7-10, 5-8 s at
# load 12-20; MAML's worker peaked at 4.1 GB (code before the grouped 4-client round), FedAvg's
# at 2.2 GB. About 1 h a cell with evaluations when the machine is quiet: the 24 trainings
# take about 12 hours of two slots.
#
# Resumable: start the same command again after a kill or a session's end. A cell resumes from
# its last checkpoint (every 50 rounds: at most 50 rounds are lost); a trained cell (TRAINED)
# only finishes its scoring; a scored cell (DONE) is skipped. A failed cell is logged and the
# queue goes on.
# At most SLOTS cells run at once over every queue that shares OUT (default 2, one a core):
# a cell waits for a free slot (<OUT>/.slots/<n>, holding the queue's PID; a dead holder's
# slot is taken over). Each queue runs SLOTS lanes; a cell is taken by one lane (<cell>.lock).
# Everything runs at nice NICE (default 19; the TFF worker too: tff_meta/runtime/priority.py).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:?set OUT to the runs folder, outside the repository}
DATA=${DATA:?set DATA to the folder holding emnist_all.sqlite}
METHODS=${METHODS:-"fedavg maml fomaml"}
SEEDS=${SEEDS:-"0 1 2"}
SLOTS=${SLOTS:-2}
NICE=${NICE:-19}
EXTRA=${EXTRA:-}   # more flags for every training, e.g. a smoke test's "--rounds=2 --eval_every=1"
mkdir -p "$OUT/.slots"
. research/queues/slots.sh   # locks, shared slots, train, score, lanes

# cells: one line per cell, "<support> <seed> <method>", in the queue's order.
cells() {
  local seed support method
  for seed in $SEEDS; do
    for method in fedavg maml; do echo "20 $seed $method"; done
  done
  for support in 50 90; do for seed in $SEEDS; do echo "$support $seed maml"; done; done
  for seed in $SEEDS; do echo "20 $seed fomaml"; done
  for support in 20 50 90; do for seed in $SEEDS; do echo "$support $seed metasgd"; done; done
}
cell_name() { echo "table2_femnist_p$1_$3_seed$2"; }   # cell_name <support> <seed> <method>
fraction() { awk "BEGIN { print $1 / 100 }"; }         # fraction <percent>

cell() {   # cell <support> <seed> <method>: a cell of METHODS, trained and scored
  local support=$1 seed=$2 method=$3
  case " $METHODS " in *" $method "*) ;; *) return 0 ;; esac
  local name; name=$(cell_name "$@")
  local folder="$OUT/$name" status=0 s
  claim "$folder" || return 0   # done, or another lane has it
  local held; held=$(slot)
  train "$name" "$folder" "configs/fedmeta/table2_femnist_p${support}_${method}.toml" "$seed"; status=$?
  if [ $status -eq 0 ]; then
    if [ "$method" = fedavg ]; then   # FedAvg (no fine-tuning) and FedAvg(Meta), every column
      for s in 20 50 90; do
        score "$folder" "$OUT/scores/p$s/$name" --support_fraction="$(fraction $s)" \
          --finetune_epochs=0,1 || status=$?
      done
    else
      score "$folder" "$OUT/scores/p$support/$name" --support_fraction="$(fraction "$support")" \
        || status=$?
    fi
    [ $status -eq 0 ] && touch "$folder/DONE"
    log "scored $name (exit $status)"
  fi
  rm -rf "$held" "$folder.lock"
}

show() {   # show <support> <seed> <method>: the rounds a begun cell has logged, and its state
  local name; name=$(cell_name "$@")
  [ -d "$OUT/$name" ] && echo "$name: round $(rounds "$OUT/$name"), $(state "$OUT/$name")"
}
if [ "${1:-}" = status ]; then each_cell show; exit 0; fi

run_lanes
