# Sourced by table2_femnist.sh, fedec_femnist.sh and shakespeare.sh (not run on its own): the
# locks of a queue's lanes, the run slots that every queue of one OUT shares (at most SLOTS runs
# at once), a cell's training and scoring, and the lanes that walk the cells. The caller sets
# OUT, SLOTS, PY, NICE, DATA, EXTRA and defines `cells` (one line per cell, its fields apart) and
# `cell <fields>`; per lane, run_lanes sets LANE and OWNER (the PID that holds the lane's locks).
STAGGER=${STAGGER:-5}   # seconds between the lanes' starts, so the first cells go in order
log() { TZ=UTC0 printf '%(%FT%TZ)T [lane %s] %s\n' -1 "$LANE" "$*"; }   # printf's clock: no fork

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
take() {   # take <dir>: an atomic lock holding this lane's PID; a dead holder's lock is taken over
  if mkdir "$1" 2>/dev/null; then echo "$OWNER" > "$1/pid"; return 0; fi
  local holder="" i
  for i in 1 2 3 4 5 6 7 8 9 10; do   # its pid follows its mkdir: wait up to 1 s for the pid
    { read -r holder < "$1/pid"; } 2>/dev/null && break
    [ -d "$1" ] || break   # released meanwhile
    sleep 0.1
  done
  if [ -z "$holder" ] || ! alive "$holder"; then
    rm -rf "$1"; mkdir "$1" 2>/dev/null && { echo "$OWNER" > "$1/pid"; return 0; }
  fi
  return 1
}
claim() {   # claim <folder>: takes the cell's <folder>.lock unless the cell is DONE or another lane has it
  [ -f "$1/DONE" ] && return 1
  take "$1.lock" || return 1
  [ -f "$1/DONE" ] || return 0
  rm -rf "$1.lock"; return 1   # another lane finished it while this one looked
}
slot() {   # slot: waits for one of the SLOTS slots, prints its folder
  while true; do
    for n in $(seq 0 $((SLOTS - 1))); do
      if take "$OUT/.slots/$n"; then echo "$OUT/.slots/$n"; return 0; fi
    done
    sleep 30
  done
}

train() {   # train <name> <folder> <config> <seed> [flags]: one programs.train, TRAINED when it exits 0
  local name=$1 folder=$2 config=$3 seed=$4; shift 4
  [ -f "$folder/TRAINED" ] && return 0   # trained before: only what follows is left
  log "start $name"
  nice -n "$NICE" "$PY" -m programs.train --progress=false --cache_dir="$DATA" --config="$config" \
    --seed="$seed" --output_dir="$folder" "$@" $EXTRA >> "$folder.log" 2>&1
  local status=$?
  [ $status -eq 0 ] && touch "$folder/TRAINED"
  log "trained $name (exit $status; $folder.log)"
  return $status
}
score() {   # score <run> <output> [flags]: one programs.evaluate into <output>.json, once
  local run=$1 out=$2; shift 2
  [ -f "$out.json" ] && return 0
  mkdir -p "$(dirname "$out")"
  nice -n "$NICE" "$PY" -m programs.evaluate --run_dir="$run" --cache_dir="$DATA" \
    --markdown=false --output="$out" "$@" > "$out.log" 2>&1
}

each_cell() {   # each_cell <function>: <function> <a cell's fields>, for each cell in order
  local fields
  cells | while read -r -a fields; do "$1" "${fields[@]}"; done
}
rounds() {   # rounds <folder>: the last round a run logged (0 before its first)
  local last; last=$(tail -n 1 "$1/metrics.csv" 2>/dev/null | cut -d, -f1)
  echo "${last:-0}"
}
state() {   # state <folder>: a cell's state: not started, training, scoring (TRAINED) or done (DONE)
  if [ -f "$1/DONE" ]; then echo done; elif [ -f "$1/TRAINED" ]; then echo scoring
  elif [ -d "$1" ]; then echo training; else echo "not started"; fi
}
lane() {   # one lane: the cells in order, each one not done nor taken by another lane
  OWNER=$BASHPID   # the PID that holds this lane's locks while it lives
  each_cell cell
  log "no cell left"
}
run_lanes() {   # SLOTS lanes, STAGGER seconds apart; returns when every lane has found no cell left
  for LANE in $(seq 1 "$SLOTS"); do
    lane &
    sleep "$STAGGER"
  done
  wait
}
