#!/bin/bash
# Run here (the control machine, with network), before tools/gpu/bench/go.sh: the toolkit's runtime packages for
# the device into .gpu/bench-site.tar.xz (tools/gpu/site.sh); the default llama.cpp tree
# (.gpu/llama.cpp-0.3.36.tar.xz, tools/gpu/README.md) must be there already.
set -euo pipefail
cd "$(dirname "$0")/../../.."
tools/gpu/site.sh bench-site
[ -f .gpu/llama.cpp-0.3.36.tar.xz ] || echo "missing: .gpu/llama.cpp-0.3.36.tar.xz (tools/gpu/README.md says how it is made)"
