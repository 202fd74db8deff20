"""`offline fill` says each file as it lands, on stderr (stdout keeps the report): one line per file with its size
and whether it was downloaded or was there already with its checksum. Real downloads from a real HTTP server on
loopback (offline.serve), through the functions fill calls (offline_pypi.fill_file, offline_apt._fetch)."""

from __future__ import annotations

import hashlib
import re

from v100kit import offline, offline_apt, offline_pypi


def test_each_file_is_one_line_on_stderr_downloaded_then_cached(tmp_path, capsys):
    served = tmp_path / "served"
    served.mkdir()
    small, big = b"tiny wheel", bytes(3 * 1024 * 1024 + 512 * 1024)  # 10 B, 3.5 MiB
    (served / "tool-1.0-py3-none-any.whl").write_bytes(small)
    (served / "pkg_1.0_amd64.deb").write_bytes(big)
    dest = tmp_path / "dir"
    with offline.serve(served, "127.0.0.1") as base:
        for _ in range(2):
            offline_pypi.fill_file(f"{base}/tool-1.0-py3-none-any.whl", hashlib.sha256(small).hexdigest(),
                                   dest / "files")
            offline_apt._fetch(f"{base}/pkg_1.0_amd64.deb", dest / "apt" / "pkg_1.0_amd64.deb",
                               hashlib.sha256(big).hexdigest())
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"offline fill: downloaded 10 B {dest}/files/tool-1.0-py3-none-any.whl",
        f"offline fill: downloaded 3.5 MiB {dest}/apt/pkg_1.0_amd64.deb",
        f"offline fill: cached 10 B {dest}/files/tool-1.0-py3-none-any.whl",
        f"offline fill: cached 3.5 MiB {dest}/apt/pkg_1.0_amd64.deb",
    ]


def test_a_file_that_fails_its_checksum_gets_no_line(tmp_path, capsys):
    served = tmp_path / "served"
    served.mkdir()
    (served / "x.whl").write_bytes(b"other bytes")
    with offline.serve(served, "127.0.0.1") as base:
        try:
            offline_pypi.fill_file(f"{base}/x.whl", "0" * 64, tmp_path / "dir")
        except offline_pypi.HashMismatch:
            pass
        else:
            raise AssertionError("a mismatch must raise")
    assert not re.search(r"^offline fill: ", capsys.readouterr().err, re.M)
