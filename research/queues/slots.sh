# Sourced by table2_femnist.sh, fedec_femnist.sh and shakespeare.sh (not run on its own): the
# locks of a queue's lanes, the run slots that every queue of one OUT shares (at most SLOTS runs
# at once) and a cell's training. The caller sets OUT, SLOTS, PY, NICE, DATA, EXTRA, and per
# lane LANE and OWNER (the PID that holds the lane's locks).
log() { echo "$(date -u +%FT%TZ) [lane $LANE] $*"; }

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
take() {   # take <dir>: an atomic lock holding this lane's PID; a dead holder's lock is taken over
  if mkdir "$1" 2>/dev/null; then echo "$OWNER" > "$1/pid"; return 0; fi
  local holder; holder=$(cat "$1/pid" 2>/dev/null)
  if [ -z "$holder" ] || ! alive "$holder"; then
    rm -rf "$1"; mkdir "$1" 2>/dev/null && { echo "$OWNER" > "$1/pid"; return 0; }
  fi
  return 1
}
slot() {   # slot: waits for one of the SLOTS slots, prints its folder
  while true; do
    for n in $(seq 0 $((SLOTS - 1))); do
      if take "$OUT/.slots/$n"; then echo "$OUT/.slots/$n"; return 0; fi
    done
    sleep 30
  done
}
train() {   # train <name> <folder> <config> <seed>: one programs.train, TRAINED when it exits 0
  [ -f "$2/TRAINED" ] && return 0   # trained before: only its scoring is left
  log "start $1"
  nice -n "$NICE" "$PY" -m programs.train --progress=false --cache_dir="$DATA" --config="$3" \
    --seed="$4" --output_dir="$2" $EXTRA >> "$2.log" 2>&1
  local status=$?
  [ $status -eq 0 ] && touch "$2/TRAINED"
  log "trained $1 (exit $status; $2.log)"
  return $status
}
