#!/usr/bin/env bash
# Remove the lab state directories earlier runs left behind: tools/sweep_lab_state.sh KEEP [DIR]
#
# A run that was killed (or a lab run by hand never destroyed) leaves its state directory, DIR/v100kit-lab-state.*
# (DIR: /var/tmp), behind: two host root filesystems, about 28 GB, which once made the lab's disk check refuse CI.
# They are scratch (the download caches live elsewhere). Removed: those no running process refers to, in its command
# line (a host's systemd-nspawn) or its environment (another run's pytest, V100KIT_LAB_STATE). Kept: KEEP (this
# run's), and any still in use, named on stdout.
set -uo pipefail
keep="${1:?usage: sweep_lab_state.sh KEEP [DIR]}"
dir="${2:-/var/tmp}"
in_use() {
  pgrep -f -- "$1/" >/dev/null 2>&1 && return 0
  grep -qs -z -x -F -- "V100KIT_LAB_STATE=$1" /proc/[0-9]*/environ
}
for old in "$dir"/v100kit-lab-state.*; do
  { [ "$old" = "$keep" ] || [ ! -d "$old" ]; } && continue
  if in_use "$old"; then
    echo "left alone: $old (a running process refers to it)"
  else
    echo "removing a lab state directory an earlier run left: $old ($(du -sh -x "$old" 2>/dev/null | cut -f1))"
    rm -rf --one-file-system "$old" || true
  fi
done
