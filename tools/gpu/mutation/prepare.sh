#!/bin/bash
# Run here (the control machine, with network), before tools/gpu/mutation/go.sh: the toolkit's locked packages with
# the dev group (mutmut, hypothesis, pytest at the locked versions) for the device's Python 3.12, into
# .gpu/mutation-site.tar.xz (tools/gpu/site.sh --dev), less matplotlib's dependencies the device image has.
set -euo pipefail
cd "$(dirname "$0")/../../.."
tools/gpu/site.sh --dev mutation-site contourpy fonttools kiwisolver cycler pyparsing pillow matplotlib import-linter grimp
