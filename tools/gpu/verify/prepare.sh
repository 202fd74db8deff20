#!/bin/bash
# Run here (the control machine, with network), before tools/gpu/verify/go.sh: puts the toolkit's locked runtime
# packages that the device image lacks (pyinfra, pydantic, paramiko, pytest-testinfra, gguf, ...; built for its
# Python 3.12, x86_64 glibc: /work/.library/device/KINDS.md) into .gpu/verify-site.tar.xz (git-ignored; ~9 MB).
# Left out: what the image already has (KINDS.md "Python packages already there"), matplotlib and its dependencies
# among them (the host suite draws nothing).
set -euo pipefail
cd "$(dirname "$0")/../../.."
UV=${UV:-$(command -v uv || echo .tools/bin/uv)}
mkdir -p .gpu
req=$(mktemp)
"$UV" export --frozen --no-dev --no-hashes --no-emit-project --format requirements-txt -q > "$req"
grep -v -i -E '^(numpy|pyyaml|jinja2|markupsafe|pytest|pluggy|iniconfig|packaging|typing-extensions|colorama|tqdm|requests|urllib3|idna|certifi|charset-normalizer|click|python-dateutil|six|setuptools|pygments|filelock|safetensors|matplotlib|pillow|contourpy|fonttools|kiwisolver|cycler|pyparsing)==' \
  "$req" > "$req.keep"
rm -rf .gpu/verify-site
"$UV" pip install -q --no-deps --target .gpu/verify-site --python-version 3.12 \
  --python-platform x86_64-manylinux_2_28 --only-binary :all: -r "$req.keep"
find .gpu/verify-site -name '__pycache__' -prune -exec rm -rf {} +
tar cJf .gpu/verify-site.tar.xz -C .gpu verify-site && rm -rf .gpu/verify-site
echo "packages: $(grep -c '==' "$req.keep"); .gpu/verify-site.tar.xz: $(du -sh .gpu/verify-site.tar.xz | cut -f1)"
rm -f "$req" "$req.keep"
