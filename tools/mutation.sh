#!/usr/bin/env bash
# Mutation testing of the pure decision modules (issue 14; docs/mutation.md): mutmut 3 mutates the functions of
# the modules in pyproject.toml's [tool.mutmut] only_mutate, runs per mutant the fast tests that reach the mutated
# function, and tools/mutation_score.py prints the per-module table. Not part of `make test`: a whole run is
# thousands of mutants (an hour or more on 2 cores).
#
#   tools/mutation.sh                      every mutant not yet tried (results are kept in mutants/ between runs)
#   tools/mutation.sh 'roles.planner.kv.*' only the mutants whose names match (tried again even if tried before)
#   tools/mutation.sh --fresh ...          remove mutants/ first (after a change to the code or the tests)
#   MUTATION_JOBS=2 tools/mutation.sh      parallel workers (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mutmut ] || { echo "no .venv/bin/mutmut: run tools/setup.sh (or .tools/bin/uv sync --frozen: dev dependencies)" >&2; exit 1; }
if [ "${1:-}" = "--fresh" ]; then
  rm -rf mutants
  shift
fi
.venv/bin/mutmut run --max-children "${MUTATION_JOBS:-1}" "$@" || true
.venv/bin/python tools/mutation_score.py --survivors
