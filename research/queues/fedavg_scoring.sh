# Sourced by other_writers.sh and other_supports.sh (not run on its own).
#
# fedavg_flags <runs folder> <cell name>: the programs.evaluate flags that score
# a Table 2 cell as its own method. FedAvg and FedAvg(Meta) train the same
# model (the same config but for the evaluation), so a FedAvg cell is scored
# with --finetune_epochs=0 and a FedAvg(Meta) cell as it ran (one epoch), and
# either is scored both ways (--finetune_epochs=0,1) when the same seed's other
# cell is missing or kept no checkpoints. Other methods: no flags.
fedavg_flags() {
  local runs=$1 name=$2 flags="" sibling=""
  if grep -q '^algorithm = "fedavg"' "$runs/$name/config.toml"; then
    flags=--finetune_epochs=0; sibling="$runs/${name/_fedavg/_fedavg_meta}"
  elif grep -q '^algorithm = "fedavg_meta"' "$runs/$name/config.toml"; then
    sibling="$runs/${name/_fedavg_meta/_fedavg}"
  fi
  if [ -n "$sibling" ] && { [ ! -f "$sibling/results.json" ] || [ ! -d "$sibling/checkpoints" ]; }; then
    flags=--finetune_epochs=0,1   # the seed's other cell is missing: this model stands for both
  fi
  echo $flags
}

# scorable <run folder>: true when the run finished and kept its checkpoints.
scorable() {
  [ -f "$1/results.json" ] && [ -d "$1/checkpoints" ]
}

# variant_folder <support> <cell name>: where a cell's scores go beside the
# others of its column, p<support>; a variant of a cell (its run folder ends in
# _resampled or _uniform, table2_queue.sh) gets p<support>_<variant>, so that
# programs.report --scores never averages it with the cell's seeds
# (--scores=<a>,<b> puts two such folders side by side).
variant_folder() {
  case $2 in
    *_resampled|*_uniform) echo "p$1_${2##*_}" ;;
    *) echo "p$1" ;;
  esac
}
