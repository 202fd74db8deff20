#!/bin/bash
# Run here (the control machine, with network), before tools/gpu/bench/go.sh: the toolkit's runtime packages for
# the device into .gpu/bench-site.tar.xz (tools/gpu/site.sh); the default llama.cpp tree
# (.gpu/llama.cpp-0.3.36.tar.xz, tools/gpu/README.md) must be there already.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# the image's own matplotlib and its friends draw the report's PNG (KINDS.md lists them): without them the site is
# 9.5 MB, not 30, which leaves room in the 64 MiB a call carries for a prebuilt llama.cpp (go.sh PREBUILT)
tools/gpu/site.sh bench-site matplotlib fonttools pillow kiwisolver contourpy hf-xet huggingface-hub cycler pyparsing
[ -f .gpu/llama.cpp-0.3.36.tar.xz ] || echo "missing: .gpu/llama.cpp-0.3.36.tar.xz (tools/gpu/README.md says how it is made)"
