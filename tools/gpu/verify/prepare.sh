#!/bin/bash
# Run here (the control machine, with network), before tools/gpu/verify/go.sh: the toolkit's runtime packages for
# the device into .gpu/verify-site.tar.xz (tools/gpu/site.sh; ~9 MB), less matplotlib and its dependencies (the
# host suite draws nothing).
set -euo pipefail
cd "$(dirname "$0")/../../.."
tools/gpu/site.sh verify-site matplotlib pillow contourpy fonttools kiwisolver cycler pyparsing
