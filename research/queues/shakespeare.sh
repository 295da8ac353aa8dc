#!/usr/bin/env bash
# FedMeta Table 2 on Shakespeare at 20% support, seed 0 (issue #65, item 6), in the capped
# setting: the paper's 50 roles a round and Table 4 rates, each role contributing at most
# max_client_examples snippets a round (configs/fedmeta/table2_shakespeare_p20_*_capped.toml;
# their headers give the cost model and the projected hours of a cell).
#
# Run it from a worktree pinned to a tag, with the run folders outside the repository:
#
#   git worktree add ../tff_meta_<tag> <tag> && cd ../tff_meta_<tag> && make setup
#   DATA=<folder of shakespeare.sqlite> OUT=<runs folder> \
#     nohup research/queues/shakespeare.sh > <runs folder>/shakespeare_queue.log 2>&1 &
#   DATA=... OUT=... research/queues/shakespeare.sh status
#
# Cells, in order: FedMeta(MAML), FedAvg, FedMeta(Meta-SGD). FedAvg and FedAvg(Meta) train the
# same model (the paper's FedAvg(Meta) only fine-tunes at test time; both read the same capped
# draw of a role's snippets each round, client_data.round_data), so FedAvg is trained once and
# scored both ways (programs.evaluate --finetune_epochs=0,1): the FedAvg(Meta) score is the
# FedAvg training fine-tuned on each test role's support set. Its config
# (table2_shakespeare_p20_fedavg_meta_capped.toml) trains the same model for a reader who
# wants the run on its own. Scores: <OUT>/scores/p20/<cell>.json, per test role.
#
# Resumable: start the same command again after a kill or a session's end. A cell resumes from
# its last checkpoint (checkpoint_every rounds); a trained cell (TRAINED) only finishes its
# scoring; a scored cell (DONE) is skipped. A failed cell is logged and the queue goes on.
# At most SLOTS cells run at once over every queue that shares OUT (default 2, one a core;
# research/queues/slots.sh). Everything runs at nice NICE (default 19).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:?set OUT to the runs folder, outside the repository}
DATA=${DATA:-}
METHODS=${METHODS:-"maml fedavg metasgd"}
SEEDS=${SEEDS:-0}
SLOTS=${SLOTS:-2}
NICE=${NICE:-19}
EXTRA=${EXTRA:-}   # more flags for every training, e.g. a smoke test's "--rounds=2 --eval_every=1"
. research/queues/slots.sh   # locks, shared slots, train, score, lanes

cells() {   # one line per cell, "<seed> <method>", in the queue's order
  local seed method
  for seed in $SEEDS; do for method in $METHODS; do echo "$seed $method"; done; done
}
cell_name() { echo "table2_shakespeare_p20_$2_capped_seed$1"; }   # cell_name <seed> <method>

cell() {   # cell <seed> <method>: trained, then scored at the config's 20% support
  local seed=$1 method=$2
  local name; name=$(cell_name "$@")
  local folder="$OUT/$name" status=0 scores="$OUT/scores/p20/$name" finetune=1
  claim "$folder" || return 0   # done, or another lane has it
  local held; held=$(slot)
  train "$name" "$folder" "configs/fedmeta/table2_shakespeare_p20_${method}_capped.toml" "$seed"; status=$?
  if [ $status -eq 0 ]; then
    [ "$method" = fedavg ] && finetune=0,1   # FedAvg and FedAvg(Meta) from one training
    score "$folder" "$scores" --finetune_epochs="$finetune"; status=$?
  fi
  [ $status -eq 0 ] && touch "$folder/DONE"
  [ $status -eq 0 ] && log "scored $name ($scores.json)"
  rm -rf "$held" "$folder.lock"
}

show() {   # show <seed> <method>: the rounds a cell has logged, and its state
  local name; name=$(cell_name "$@")
  echo "$name: round $(rounds "$OUT/$name"), $(state "$OUT/$name")"
}
if [ "${1:-}" = status ]; then each_cell show; exit 0; fi
[ -n "$DATA" ] || { echo "error: set DATA to the folder holding shakespeare.sqlite" >&2; exit 2; }
mkdir -p "$OUT/.slots"

run_lanes
