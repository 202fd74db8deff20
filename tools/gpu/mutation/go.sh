#!/bin/bash
# Issue 14's full mutation run on the device machine's 16 cores (the control machine has 2: about an hour there).
# Not a GPU job: the device is used for its cores. mutmut 3 as tools/mutation.sh runs it, with one worker per core.
# Run from the repository root on the device, with .gpu/mutation-site.tar.xz carried (tools/gpu/mutation/prepare.sh):
#   bash tools/gpu/mutation/go.sh [SECONDS [MUTANT-GLOB ...]]
# mutmut keeps its results in mutants/ (git-ignored, kept between calls on a warm machine): a run stopped at SECONDS
# (default 540) goes on where it stopped when called again. Into $OUT: mutants-meta.tar.gz (every *.meta: the exit
# code per mutant, which tools/mutation_score.py reads here after `tar xzf` in the repository root) and score.txt.
LIMIT=${1:-540}
mkdir -p "${OUT:=$PWD/out}"
[ -d /tmp/mutation-site ] || tar xJf .gpu/mutation-site.tar.xz -C /tmp
export PYTHONPATH=/tmp/mutation-site PYTHONUNBUFFERED=1
python3 -c 'import mutmut, pyinfra, pydantic, testinfra, gguf, hypothesis' || { echo "packages missing"; exit 1; }
echo "== $(nproc) cores; $(python3 -V); mutmut $(python3 -c 'import importlib.metadata as m; print(m.version("mutmut"))')"
T0=$(date +%s)
shift || true  # then mutant names or globs (mutmut run's own arguments): only those are tried
timeout "$LIMIT" python3 -c 'import sys; from mutmut.__main__ import cli; sys.argv = ["mutmut", "run", "--max-children", *sys.argv[1:]]; cli()' "$(nproc)" "$@" \
  > "$OUT/mutmut.log" 2>&1
echo "mutmut exit $? after $(( $(date +%s) - T0 )) s"
tail -c 1500 "$OUT/mutmut.log" | tr '\r' '\n' | tail -5
find mutants -name '*.meta' | tar czf "$OUT/mutants-meta.tar.gz" -T -
python3 tools/mutation_score.py > "$OUT/score.txt" 2>&1; cat "$OUT/score.txt"
