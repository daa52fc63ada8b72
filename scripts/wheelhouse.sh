#!/usr/bin/env bash
# The wheels `make wheel` and `make deb` build from without network (scripts/deb.py): the
# build backend (hatchling) and the libraries the Debian package bundles
# (packaging/bundle.txt). Idempotent: nothing is fetched when every pinned wheel is there.
# Where: $LBTUNE_WHEELHOUSE, else /var/cache/lbtune/wheels as root, else ~/.cache/lbtune/wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
if [ -n "${LBTUNE_WHEELHOUSE:-}" ]; then WH=$LBTUNE_WHEELHOUSE
elif [ "$(id -u)" -eq 0 ]; then WH=/var/cache/lbtune/wheels
else WH=$HOME/.cache/lbtune/wheels; fi
mkdir -p "$WH"
missing=0
while read -r req; do
  case "$req" in ''|'#'*) continue ;; esac
  name=${req%%==*}; ver=${req#*==}
  norm=$(echo "$name" | tr 'A-Z-' 'a-z_')
  ls "$WH" | tr 'A-Z-' 'a-z_' | grep -q "^${norm}_${ver}_" || missing=1
done < packaging/bundle.txt
ls "$WH" | grep -q '^hatchling-' || missing=1
if [ "$missing" -eq 0 ]; then
  echo "[setup] wheelhouse $WH complete"
  exit 0
fi
echo "[setup] fetching the package's wheels into $WH"
"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$WH" \
  -r packaging/bundle.txt hatchling
