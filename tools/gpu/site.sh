#!/bin/bash
# tools/gpu/site.sh [--dev] NAME [EXTRA_EXCLUDED ...]: run here (the control machine, with network). Puts the toolkit's
# locked runtime packages that the device image lacks (built for its Python 3.12, x86_64 glibc:
# /work/.library/device/KINDS.md) into .gpu/NAME.tar.xz (git-ignored), for a GPU script to unpack.
# Left out: what the image already has (KINDS.md "Python packages already there": numpy's C extensions and friends
# are the large ones, and the image's own builds match its Python), plus EXTRA_EXCLUDED package names.
set -euo pipefail
cd "$(dirname "$0")/../.."
groups=--no-dev  # --dev: the dev group too (mutmut, hypothesis), and pytest itself at the locked version
keep_pytest=""
if [ "${1:-}" = "--dev" ]; then groups=""; keep_pytest=1; shift; fi
name=$1; shift
UV=${UV:-$(command -v uv || echo .tools/bin/uv)}
mkdir -p .gpu
req=$(mktemp)
"$UV" export --frozen $groups --no-hashes --no-emit-project --format requirements-txt -q > "$req"
skip="numpy|pyyaml|jinja2|markupsafe|pytest|pluggy|iniconfig|packaging|typing-extensions|colorama|tqdm|requests|urllib3|idna|certifi|charset-normalizer|click|python-dateutil|six|setuptools|pygments|filelock|safetensors"
[ -n "$keep_pytest" ] && skip=${skip//|pytest|pluggy|iniconfig/}
for extra in "$@"; do skip="$skip|$extra"; done
grep -v -i -E "^($skip)==" "$req" > "$req.keep"
rm -rf ".gpu/$name"
"$UV" pip install -q --no-deps --target ".gpu/$name" --python-version 3.12 \
  --python-platform x86_64-manylinux_2_28 --only-binary :all: -r "$req.keep"
find ".gpu/$name" -name '__pycache__' -prune -exec rm -rf {} +
tar cJf ".gpu/$name.tar.xz" -C .gpu "$name" && rm -rf ".gpu/$name"
echo "packages: $(grep -c '==' "$req.keep"); .gpu/$name.tar.xz: $(du -sh ".gpu/$name.tar.xz" | cut -f1)"
rm -f "$req" "$req.keep"
