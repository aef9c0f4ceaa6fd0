#!/bin/bash
# Slurm-web's own signing key (the gateway signs the anonymous token, the agent checks it), one
# key in each component's directory. `ensure`: made once on the controller (32 random bytes as 64
# hex digits, as `slurm-web gen-jwt-key` makes it), copied to the other directory; `check`
# (read-only): both present, the same, 0440 root:$2, 64 hex digits. Prints no key.
set -euo pipefail
mode=$1 gid=$2 name=$3
shift 3
dirs=("$@")
files=()
for d in "${dirs[@]}"; do files+=("$d/$name"); done
if [ "$mode" = ensure ]; then
  for d in "${dirs[@]}"; do install -d -m 0750 -o root -g "$gid" "$d"; done
  src=
  for f in "${files[@]}"; do [ -s "$f" ] && { src=$f; break; }; done
  if [ -z "$src" ]; then
    src=${files[0]}
    tmp=$(mktemp "$(dirname "$src")/.key.XXXXXX")
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp"
    mv -f "$tmp" "$src"
  fi
  for f in "${files[@]}"; do
    if [ "$f" != "$src" ]; then
      tmp=$(mktemp "$(dirname "$f")/.key.XXXXXX")
      cat "$src" >"$tmp"
      mv -f "$tmp" "$f"
    fi
    chown "root:$gid" "$f"
    chmod 0440 "$f"
  done
fi
sums=()
for f in "${files[@]}"; do
  if [ ! -f "$f" ]; then echo "no key $f"; exit 1; fi
  read -r m o g < <(stat -c '%a %u %g' "$f")
  echo "$f mode $m owner $o group $g"
  if [ "$m" != 440 ] || [ "$o" != 0 ] || [ "$g" != "$gid" ]; then echo "$f: want 0440 0:$gid"; exit 1; fi
  if ! grep -qxE '[0-9a-f]{64}' "$f"; then echo "$f is not 64 hex digits"; exit 1; fi
  sums+=("$(sha256sum <"$f" | cut -c1-64)")
done
if [ "$(printf '%s\n' "${sums[@]}" | sort -u | wc -l)" != 1 ]; then echo "the keys differ"; exit 1; fi
echo "one key in ${#files[@]} places"
