#!/usr/bin/env bash
# Installs what the toolkit needs on a fresh Debian 12 machine: a pinned uv and the locked Python environment
# in .venv; with --lab also the lab's packages (as root: mmdebstrap, systemd-container, openssh-client, and Debian's
# prometheus for promtool and the monitoring suite's Prometheus: tests/lab/test_monitoring.py starts its own).
# Safe to run again: it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.8
apt_install() {
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

if [ "${1:-}" = "--lab" ]; then
  need=()
  for cmd in mmdebstrap:mmdebstrap systemd-nspawn:systemd-container ssh-keygen:openssh-client dpkg-deb:dpkg \
             promtool:prometheus; do
    command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd##*:}")
  done
  [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
fi

# uv at the pinned version: the one on PATH if it matches, else our own copy in .tools (a venv, so that a
# distribution Python that refuses pip installs, PEP 668, is not touched)
UV=uv
if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  if [ ! -x .tools/bin/uv ] || [ "$(.tools/bin/uv --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    python3 -m venv .tools 2>/dev/null || { apt_install python3-venv && python3 -m venv .tools; }
    .tools/bin/python -m pip install -q "uv==$UV_VERSION"
  fi
  UV=.tools/bin/uv
fi
"$UV" sync --frozen -q
