"""The apt part of the offline directory (#17) against Debian's real archive: a suite's InRelease and indexes
filled, a package resolved by apt itself from the filled directory (served on loopback) for this machine's own
dpkg status, its .deb fetched and checked. Independent checks: dpkg-deb reads the package, apt-get update from the
directory accepts every index (it checks them against the InRelease), the package list comes from a real deploy
plan's commands."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.plan.harness import DEBIAN_12, plan_commands
from v100kit import offline_apt
from v100kit.offline import serve

MIRROR = "http://deb.debian.org/debian"
COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
REPOS = [(MIRROR, ("bookworm",), COMPONENTS)]


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("offline") / "apt"
    try:
        offline_apt.fill_repository(root, MIRROR, "bookworm", COMPONENTS, "amd64")
    except offline_apt.OfflineError as e:
        pytest.skip(f"Debian's archive unreachable from here: {e}")
    return root


def test_indexes_are_the_ones_the_inrelease_lists_and_are_also_stored_by_hash(filled):
    base = filled / "deb.debian.org/debian/dists/bookworm"
    listed = offline_apt.release_sha256((base / "InRelease").read_text())
    packages = base / "main/binary-amd64/Packages.xz"
    sha = hashlib.sha256(packages.read_bytes()).hexdigest()
    assert listed["main/binary-amd64/Packages.xz"][0] == sha
    assert (base / "main/binary-amd64/by-hash/SHA256" / sha).samefile(packages)
    # Debian's Release says architecture-independent packages are in binary-amd64: no binary-all index
    assert not (base / "main/binary-all").exists()


def test_apt_resolves_from_the_directory_and_the_deb_is_debians(filled, tmp_path):
    status = Path("/var/lib/dpkg/status").read_text()
    with serve(filled, "127.0.0.1") as url:
        debs = offline_apt.resolve(filled, REPOS, ["hello"], status, "amd64", url)
    assert [Path(d.url).name.split("_")[0] for d in debs] == ["hello"]
    (path,) = offline_apt.fill_debs(filled, debs, {"deb.debian.org": "http"})
    assert path.is_relative_to(filled / "deb.debian.org/debian/pool/main/h/hello")
    assert subprocess.run(["dpkg-deb", "-f", str(path), "Package"], capture_output=True, text=True).stdout.strip() \
        == "hello"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == debs[0].sha256


def test_a_tampered_index_is_fetched_again(filled):
    packages = filled / "deb.debian.org/debian/dists/bookworm/contrib/binary-amd64/Packages.xz"
    good = packages.read_bytes()
    by_hash = packages.parent / "by-hash/SHA256" / hashlib.sha256(good).hexdigest()
    packages.unlink()
    by_hash.unlink()
    by_hash.write_bytes(b"not the index")
    offline_apt.fill_repository(filled, MIRROR, "bookworm", COMPONENTS, "amd64")
    assert packages.read_bytes() == good and by_hash.read_bytes() == good


def test_apt_packages_are_read_from_a_real_deploy_plan():
    packages = offline_apt.apt_packages([str(c) for c in plan_commands(DEBIAN_12, {}, stops_early=True)])
    assert {"ca-certificates", "curl", "dkms"} <= set(packages)
    assert any(p.startswith("nvidia-kernel-dkms=") for p in packages)
    assert not [p for p in packages if p.startswith("-") or "Dpkg::" in p]


def test_a_url_outside_http_is_refused():
    with pytest.raises(offline_apt.OfflineError, match="not an http"):
        offline_apt.local_path(Path("/x"), "file:///etc/passwd")
    with pytest.raises(offline_apt.OfflineError, match="not an http"):
        offline_apt.local_path(Path("/x"), "http://h/debian/../../etc/passwd")
