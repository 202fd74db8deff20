#!/bin/bash
# Run here (the control machine, with network), before tools/gpu/bench/go.sh: fills the git-ignored .gpu/ folder
# with what the device machine cannot fetch. The toolkit's locked runtime packages that the device image lacks go
# into .gpu/bench-site, built for its python3 (3.12, x86_64 glibc: /work/.library/device/KINDS.md); the default
# llama.cpp tree (.gpu/llama.cpp-0.3.36.tar.xz, tools/gpu/README.md) must be there already.
set -euo pipefail
cd "$(dirname "$0")/../../.."
UV=${UV:-$(command -v uv || echo .tools/bin/uv)}
mkdir -p .gpu
req=$(mktemp)
"$UV" export --frozen --no-dev --no-hashes --no-emit-project --format requirements-txt -q > "$req"
# already in the device image (KINDS.md "Python packages already there"): numpy's C extensions and friends are
# the large ones, and the image's own builds match its Python
grep -v -i -E '^(numpy|pyyaml|jinja2|markupsafe|pytest|pluggy|iniconfig|packaging|typing-extensions|colorama|tqdm|requests|urllib3|idna|certifi|charset-normalizer|click|python-dateutil|six|setuptools|pygments|filelock|safetensors)==' \
  "$req" > "$req.keep"
rm -rf .gpu/bench-site
"$UV" pip install -q --no-deps --target .gpu/bench-site --python-version 3.12 \
  --python-platform x86_64-manylinux_2_28 --only-binary :all: -r "$req.keep"
find .gpu/bench-site -name '__pycache__' -prune -exec rm -rf {} +
tar cJf .gpu/bench-site.tar.xz -C .gpu bench-site && rm -rf .gpu/bench-site
echo "packages: $(grep -c '==' "$req.keep"); .gpu/bench-site.tar.xz: $(du -sh .gpu/bench-site.tar.xz | cut -f1)"
rm -f "$req" "$req.keep"
[ -f .gpu/llama.cpp-0.3.36.tar.xz ] || echo "missing: .gpu/llama.cpp-0.3.36.tar.xz (tools/gpu/README.md says how it is made)"
