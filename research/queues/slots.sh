# Sourced by table2_femnist.sh and fedec_femnist.sh (not run on its own): the locks of a
# queue's lanes and the run slots that every queue of one OUT shares (at most SLOTS runs at once).
# The caller sets OUT, SLOTS, and per lane LANE and OWNER (the PID that holds the lane's locks).
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
