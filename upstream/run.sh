#!/usr/bin/env bash
# LangGraph's own test suite (the tests/ folder of the langgraph sdist matching the installed
# version) run twice: with LangGraph's stock savers, then with this project's resilient savers
# substituted into its checkpointer fixtures. Prints, per backend, passed/failed for both, and
# every test that passes on stock but fails on ours.
#
# `make test-upstream` installs the `upstream` extra (the suite's test-only packages, pinned)
# and runs this from the project root:
#   upstream/run.sh                   # all ~3,066 saver-backed tests, both modes (~15 min)
#   upstream/run.sh IDS_FILE          # only these test ids, both modes
#   MODES=resilient upstream/run.sh IDS_FILE
# Needs Postgres at LGR_POSTGRES_URL's server (scratch databases named upeval_*) and access to
# the package index (pip download of the langgraph sdist). Exits 1 when a test passes on stock
# and fails on ours.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(pwd)
py="$root/.venv/bin/python"
[ -x "$py" ] || { echo "run from the project root after make install"; exit 2; }
work=${UPEVAL_DIR:-$(mktemp -d -t upstream-XXXX)}
ver=$("$py" -c "import importlib.metadata as m; print(m.version('langgraph'))")
url=${LGR_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
export UPEVAL_PG_URI="${url%/*}/"
"$py" -c "import syrupy, xdist, pytest_mock, pytest_repeat, Crypto, redis" 2>/dev/null \
  || { echo "the upstream extra is missing: run make test-upstream (or pip install -e '.[upstream]')"; exit 2; }
if [ ! -d "$work/src" ]; then
  "$py" -m pip download -q --no-deps --no-binary :all: "langgraph==$ver" -d "$work/sdist" 2>&1 | grep -v '^WARNING' || true
  tar xzf "$work/sdist/langgraph-$ver.tar.gz" -C "$work" && mv "$work/langgraph-$ver" "$work/src"
  (cd "$work/src" && git apply -p2 "$here/conftest.patch")
fi
cd "$work/src"
if [ $# -ge 1 ]; then
  ids=$(cd "$root" && realpath "$1")
else
  "$py" -m pytest -p no:asyncio -p no:cacheprovider --collect-only -q $(cat "$here/files.txt") | grep '::' > "$work/all_ids.txt"
  "$py" "$here/make_ids.py" "$work/all_ids.txt" > "$work/selected_ids.txt"
  ids="$work/selected_ids.txt"
fi
echo "langgraph $ver tests: $(wc -l < "$ids") ids; work dir $work"
for mode in ${MODES:-stock resilient}; do
  start=$(date +%s)
  UPEVAL_SAVERS=$mode "$py" -m pytest -p no:asyncio -p no:cacheprovider -q -rfE --timeout 300 \
     --tb=short -n 2 --dist worksteal --junitxml="$work/results-$mode.xml" @"$ids" > "$work/$mode.log" 2>&1 || true
  echo "$mode: $(tail -n 1 "$work/$mode.log")  [$(( $(date +%s) - start )) s]"
done
if [ -f "$work/results-stock.xml" ] && [ -f "$work/results-resilient.xml" ]; then
  "$py" "$here/compare.py" "$work/results-stock.xml" "$work/results-resilient.xml" | tee "$work/compare.txt" | tail -n 40
  grep -q '^count 0$' "$work/compare.txt" || exit 1
fi
