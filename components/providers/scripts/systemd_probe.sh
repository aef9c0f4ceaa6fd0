#!/bin/sh
# Reads a unit: the SHA-256 of each managed file, then `systemctl show` of its states.
# $1 the unit, then its managed file paths. $PROPS is a template slot, not a variable:
# systemd.py replaces it with the "-p Name" options of the live properties it checks.
# A file's line is sha256sum's own ("sha256 <hex>  <path>"); the show output is read by the
# shell itself (no cut, sed or grep: a host's refresh runs this for every unit).

u="$1"; shift
REACH_S=5
for f in "$@"; do
  if [ -f "$f" ]; then printf 'sha256 '; sha256sum -- "$f"; else echo "file $f absent"; fi
done
echo "== show"
# A mount unit that systemd calls active may still serve nothing: a network mount whose server
# handles went stale (the store mounted again under it) answers ESTALE. Read its root, bounded.
where_opt=""
case "$u" in *.mount) where_opt="-p Where" ;; esac
# shellcheck disable=SC2086 # the slot's -p options (see above) and $where_opt must split into words
show=$(systemctl show "$u" -p LoadState -p ActiveState -p UnitFileState -p NeedDaemonReload $where_opt $PROPS 2>/dev/null)
printf '%s\n' "$show"
where=""; active=""
while IFS= read -r line; do
  case "$line" in
    Where=*) where="${line#Where=}" ;;
    ActiveState=active) active=yes ;;
  esac
done <<EOF
$show
EOF
if [ -n "$where" ] && [ -n "$active" ]; then
  echo "== reach"
  # In the background, and never waited on past REACH_S: a stat stuck in the kernel on a mount
  # whose server is gone (FUSE waits for its daemon's reply, killable or not) would hold this
  # probe, and every probe sharing its round trip, for as long as the server's own timeout.
  # It keeps no descriptor of the session, so the session ends without it.
  err=$(mktemp) || exit 1
  stat -c %d -- "$where/." </dev/null >/dev/null 2>"$err" &
  pid=$!
  n=0
  while kill -0 "$pid" 2>/dev/null && [ "$n" -lt $((REACH_S * 10)) ]; do sleep 0.1; n=$((n + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null
    echo "stat timed out after $REACH_S s"
  elif wait "$pid"; then
    echo ok
  else
    msg=$(cat "$err"); echo "${msg:-stat failed}"
  fi
  rm -f "$err"
fi
