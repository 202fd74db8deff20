"""Benchmark: llama.cpp cold build, warm rebuild (ccache), and no-op deploy on a lab host.

    .venv/bin/python tools/bench_llama_cpp.py [HOST]     # default lab-trixie; the lab must be provisioned

Cold: empty ccache, a source variant never built before. Warm: another variant (a new prefix, same code), ccache
filled by the cold build. No-op: the same settings again. Finally the host's own settings are deployed again
(rollback to its original build: no build, the link moves back). Prints seconds and changed-operation counts.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


from lab.harness import Lab, spec
from lab.sources import llama_cpp_default_source, sha256_of
from lab.provision import deploy
from roles.llama_cpp.versions import DEFAULT_SOURCE


def variant(tmp: Path, name: str) -> Path:
    """The default llama.cpp tree plus one marker file: new bytes, so a new prefix; same code for ccache."""
    work = tmp / name
    work.mkdir()
    subprocess.run(["tar", "-xzf", str(llama_cpp_default_source()), "-C", str(work),
                    DEFAULT_SOURCE.subdir], check=True)
    (work / DEFAULT_SOURCE.subdir / "V100KIT-BENCH").write_text(f"{name} {time.time()}\n")
    archive = tmp / f"{name}.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str((work / DEFAULT_SOURCE.subdir).parent), "llama.cpp"],
                   check=True)
    return archive


def main() -> int:
    s = spec(sys.argv[1] if len(sys.argv) > 1 else "lab-trixie")
    lab = Lab()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        stamp = int(time.time())
        rows = []
        for label, clear_ccache in (("cold build", True), ("warm rebuild (ccache)", False)):
            archive = variant(tmp, f"bench{stamp}-{len(rows)}")
            if clear_ccache:
                lab.run(s, "rm -rf /var/cache/v100kit/ccache")
            args = ["--limit", s.name, "--data", f"llama_cpp_ref=bench{stamp}-{len(rows)}",
                    "--data", f"llama_cpp_source={archive}", "--data", f"llama_cpp_source_sha256={sha256_of(archive)}",
                    "--data", f"llama_cpp_flash_attn_style={DEFAULT_SOURCE.flash_attn_style}"]
            run = deploy(f"bench-llama-{len(rows)}", args)
            rows.append((label, run))
            if label.startswith("warm"):
                rows.append(("no-op deploy", deploy("bench-llama-noop", args)))
        rows.append(("back to the host's settings", deploy("bench-llama-back", ["--limit", s.name])))
        print(f"{s.name}: llama.cpp {'':28} seconds  changed ops  rc")
        for label, run in rows:
            print(f"  {label:38} {run.seconds:7.1f}  {run.changed.get(s.name, 0):11d}  {run.rc}")
        lab.run(s, "rm -rf /opt/llama.cpp/bench*")  # the benchmark's own prefixes, never the user's
    return 0


if __name__ == "__main__":
    sys.exit(main())
