#!/usr/bin/env bash
# Installs what the toolkit and its lab need on a fresh Debian 12 machine (run as root): the lab's packages,
# a pinned uv, and the locked Python environment in .venv. Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.8
need=()
for cmd in mmdebstrap:mmdebstrap systemd-nspawn:systemd-container ssh-keygen:openssh-client; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi
if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  python3 -m pip install -q "uv==$UV_VERSION"
fi
uv sync --frozen -q
