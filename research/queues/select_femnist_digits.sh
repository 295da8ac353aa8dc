#!/usr/bin/env bash
# Report 003 on FEMNIST digits: each method's rates chosen on VALIDATION
# clients (5 per seed, the config's client_split), mean over seeds 0, 1, 2,
# never on test (programs.sweep). The report "fine-tunes alpha and beta"
# (Sec. 4.2) and keeps epochs = 1, batch 32 (Sec. 6.2), so the grids are:
# the client rate for FedAvg, FedAvg(Meta), FedPer and LG-FedAvg; alpha x beta
# for FedMeta(MAML) and FedMeta(Meta-SGD). FedMeta+FedPer reuses them (Sec. 6.2:
# "reuse the hyperparameters of the previous experiment"): FedMeta's alpha and
# beta, FedPer's client rate for the personal layers; FedAvg(Meta)+FedPer takes
# FedPer's client rate. Each grid was widened once where the first, 3-value
# grid's choice lay on its edge (FedAvg's client rate 0.3 -> 1.0 added; MAML's
# alpha 0.03, beta 0.001 -> 0.01 and 0.0003 added).
#
#   nohup research/queues/select_femnist_digits.sh > runs/report003_select.log 2>&1 &
#
# Resumable: a finished run is read back (programs.sweep).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-runs/report003_select}
S="nice -n ${NICE:-19} $PY -m programs.sweep --config=configs/report003/femnist_digits.toml --seeds=0,1,2"
# eval_every=300: only the final round is scored (the selection reads it), which
# halves a run's cost; the training is the same.
for m in fedavg fedavg_meta fedper lg_fedavg; do
  $S --algorithm=$m --grid="client_lr=0.03,0.1,0.3,1.0;eval_every=300" --output_dir="$OUT/$m"
done
for m in fedmeta_maml fedmeta_metasgd; do
  $S --algorithm=$m --grid="inner_lr=0.01,0.03,0.1,0.3;server_lr=0.0003,0.001,0.003,0.01;eval_every=300" \
    --output_dir="$OUT/$m"
done
