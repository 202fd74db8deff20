"""The sm_70 check of machine code (roles/vllm/machine_code.py): the verdict rule against NVIDIA's, the listing
parser against real cuobjdump output, the pinned cuobjdump on small ELF files built here, the evidence round trip,
and the committed evidence of every supported lock against the lock's own pins."""

from __future__ import annotations

import json
import re
import struct
import zipfile
from pathlib import Path

import pytest

from roles.vllm import machine_code as mc
from roles.vllm.machine_code import CudaBinary, LockCheck, WheelRead
from roles.vllm.versions import VLLM_RELEASES
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from v100kit.offline_pypi import lock_glibc, lock_requirements, wheel_rank

DATA = Path(__file__).resolve().parents[1] / "data" / "sm70"


# -- the verdict rule ---------------------------------------------------------------------------------------------

# NVIDIA, CUDA C++ Programming Guide, "Binary Compatibility": "a cubin object generated for compute capability X.y
# will only execute on devices of compute capability X.z where z >= y"; "PTX Compatibility": "PTX code produced for
# some specific compute capability can always be compiled to binary code of greater or equal compute capability";
# arch-specific targets (sm_90a, compute_90a) are not forward compatible. Cases written from those sentences.
SASS_CASES = [
    ("sm_70", (7, 0), True), ("sm_70", (7, 5), True), ("sm_72", (7, 0), False), ("sm_75", (7, 0), False),
    ("sm_60", (7, 0), False), ("sm_61", (7, 0), False), ("sm_80", (7, 0), False), ("sm_80", (8, 6), True),
    ("sm_86", (8, 0), False), ("sm_90a", (9, 0), True), ("sm_90a", (7, 0), False), ("sm_100a", (10, 3), False),
    ("sm_100", (10, 3), True), ("sm_52", (5, 3), True), ("sm_120", (12, 1), True), ("sm_120", (7, 0), False),
]
PTX_CASES = [
    ("compute_70", (7, 0), True), ("compute_60", (7, 0), True), ("compute_52", (7, 0), True),
    ("compute_75", (7, 0), False), ("compute_80", (7, 0), False), ("compute_80", (9, 0), True),
    ("compute_90a", (9, 0), True), ("compute_90a", (10, 0), False), ("compute_120", (7, 0), False),
]


@pytest.mark.parametrize("sass,capability,runs", SASS_CASES)
def test_sass_runs_only_on_its_major_at_an_equal_or_higher_minor(sass, capability, runs):
    assert mc.sass_runs_on(sass, capability) is runs


@pytest.mark.parametrize("ptx,capability,runs", PTX_CASES)
def test_ptx_is_compiled_for_any_equal_or_higher_compute_capability(ptx, capability, runs):
    assert mc.ptx_runs_on(ptx, capability) is runs


@pytest.mark.parametrize("sass,ptx,runs", [
    (("sm_70",), (), True), (("sm_75", "sm_80"), (), False), (("sm_72",), (), False),
    (("sm_80",), ("compute_70",), True), (("sm_80",), ("compute_52",), True), (("sm_75",), ("compute_75",), False),
    ((), ("compute_80",), False), ((), (), False), (("sm_60", "sm_61"), (), False),
])
def test_a_binary_runs_on_a_v100_with_sm_70_sass_or_ptx_up_to_compute_70(sass, ptx, runs):
    assert CudaBinary("w.whl", "lib.so", sass, ptx).runs_on_sm70 is runs


def test_an_architecture_name_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a GPU architecture"):
        mc.sass_runs_on("sm70", (7, 0))


# -- the parser, on real cuobjdump output --------------------------------------------------------------------------

def test_parser_reads_xformers_listing_as_its_build_record_says():
    # cuobjdump 13.5.37 --list-elf --list-ptx xformers/_C.so of xformers-0.0.32.post1 (the 0.10.2 locks). The
    # wheel's own xformers/cpp_lib.json records TORCH_CUDA_ARCH_LIST "7.5 8.0+PTX 9.0a": SASS 7.5, 8.0, 9.0a and
    # PTX 8.0, no sm_70.
    sass, ptx = mc.parse_listing((DATA / "cuobjdump-xformers-0.0.32.post1-_C.so.txt").read_text())
    assert sass == ("sm_75", "sm_80", "sm_90a") and ptx == ("compute_80",)
    assert not CudaBinary("xformers.whl", "xformers/_C.so", sass, ptx).runs_on_sm70


def test_parser_reads_flashmla_as_hopper_only():
    # vLLM builds FlashMLA for 9.0a only (cmake/external_projects/flashmla.cmake); cuobjdump 13.5.37's listing of
    # vllm/_flashmla_C.abi3.so from vllm-0.10.2's wheel
    text = (DATA / "cuobjdump-vllm-0.10.2-_flashmla_C.abi3.so.txt").read_text()
    assert len(text.splitlines()) == 4
    assert mc.parse_listing(text) == (("sm_90a",), ())


def test_host_only_elf_is_recognised_by_cuobjdumps_own_message(tmp_path, monkeypatch):
    # the real stderr of cuobjdump 13.5.37 (exit 255) on vllm/cumem_allocator.abi3.so, a host-only library
    message = (DATA / "cuobjdump-vllm-0.10.2-cumem_allocator.abi3.so.stderr").read_text()

    class Done:
        returncode, stdout, stderr = 255, "", message
    monkeypatch.setattr(mc.subprocess, "run", lambda *a, **k: Done())
    assert mc.read_elf(tmp_path / "x.so", Path("cuobjdump")) is None
    Done.stderr = "cuobjdump fatal   : Invalid fatbin header in 'x.so'"
    with pytest.raises(mc.MachineCodeError, match="Invalid fatbin header"):
        mc.read_elf(tmp_path / "x.so", Path("cuobjdump"))


# -- the pinned cuobjdump on ELF files built here ------------------------------------------------------------------

def _ptx_fatbin(arch: int) -> bytes:
    """A fatbin with one uncompressed PTX entry for compute_<arch>: the fatbin header (magic 0xBA55ED50, version 1,
    header size 16, size of the rest; CUDA's fatbinary_section.h) and a 72-byte entry header of kind 1 (PTX), the
    layout NVIDIA's own PTX entries have (as found in libcufft.so.11's fatbins)."""
    ptx = f".version 6.0\n.target sm_{arch}\n.address_size 64\n".encode() + b"\0"
    ptx += bytes(-len(ptx) % 8)
    entry = struct.pack("<HHIQIIHHIIIQQQ", 1, 0x0101, 72, len(ptx), 0, 64, 0, 7, arch, 0, 0, 0x11, 0, 0) + bytes(8)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry) + len(ptx)) + entry + ptx


def _elf(sections: list[tuple[bytes, bytes]], outside: bytes = b"") -> bytes:
    """An ELF64 little-endian x86-64 shared object (System V gABI layout) with these (name, bytes) sections and
    `outside` placed in no section."""
    names = b"\0" + b"".join(n + b"\0" for n, _ in sections) + b".shstrtab\0"
    body = bytearray(64)
    offsets = []
    for _, data in sections:
        body += bytes(-len(body) % 8)
        offsets.append(len(body))
        body += data
    body += bytes(-len(body) % 8) + outside
    strtab_at = len(body)
    body += names + bytes(-(len(body) + len(names)) % 8)
    shoff = len(body)
    headers, at = [bytes(64)], 1
    for (name, data), offset in zip(sections, offsets):
        headers.append(struct.pack("<IIQQQQIIQQ", at, 1, 2, 0, offset, len(data), 0, 0, 8, 0))
        at += len(name) + 1
    headers.append(struct.pack("<IIQQQQIIQQ", at, 3, 0, 0, strtab_at, len(names), 0, 0, 1, 0))
    body += b"".join(headers)
    body[:64] = (b"\x7fELF\x02\x01\x01" + bytes(9)
                 + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, len(headers),
                               len(headers) - 1))
    return bytes(body)


def _bad_cubin_fatbin(arch: int) -> bytes:
    """A fatbin whose one ELF entry (kind 2) for sm_<arch> is no ELF: cuobjdump refuses it ("Invalid ELF")."""
    payload = b"\x7fELF" + bytes(60)
    entry = struct.pack("<HHIQIIHHIIIQQQ", 2, 0x0101, 64, len(payload), 0, 0, 0, 1, arch, 0, 0, 0x11, 0, 0)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry) + len(payload)) + entry + payload


def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/_kernels.so", _elf([(b".nv_fatbin", _ptx_fatbin(70))], outside=_ptx_fatbin(52)))
        zf.writestr("pkg/_host.so", _elf([(b".text", b"\x90" * 16)]))
        zf.writestr("pkg/__init__.py", "x = 1\n" * 20)
        zf.writestr("pkg/sm80.so", _elf([(b".nv_fatbin", _ptx_fatbin(80))]))
        # cuobjdump refuses the whole file for the second fatbin: each fatbin is then read alone, and the refused
        # one counts by its entry header
        zf.writestr("pkg/refused.so", _elf([(b".nv_fatbin", _ptx_fatbin(70) + _bad_cubin_fatbin(90))]))
    return path


def test_pinned_cuobjdump_reads_a_wheels_elf_members(tmp_path):
    tool, version = mc.cuobjdump()
    assert version == mc.CUOBJDUMP_VERSION
    binaries, plain, cubins = mc.read_wheel(_wheel(tmp_path / "pkg-1.0-py3-none-any.whl"), tool, tmp_path)
    assert plain == ["pkg/_host.so"] and cubins == {}
    assert [(b.member, b.sass, b.ptx, b.embedded, b.unreadable) for b in binaries] == [
        ("pkg/_kernels.so", (), ("compute_52", "compute_70"), 1, 0),  # .nv_fatbin: 7.0; outside it: 5.2
        ("pkg/sm80.so", (), ("compute_80",), 0, 0),
        ("pkg/refused.so", ("sm_90",), ("compute_70",), 0, 1)]
    assert [b.runs_on_sm70 for b in binaries] == [True, False, True]


def test_check_lock_reads_each_wheel_once_per_sha256(tmp_path, monkeypatch):
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    lock = tmp_path / "vllm-9.9-py3.12.txt"
    lock.write_text("pkg==1.0 --hash=sha256:" + "0" * 64 + "\n")
    asked = []
    check = mc.check_lock(lock, tmp_path / "cache", lambda l, py, dest: asked.append((l, py)) or [wheel])
    assert asked == [(lock, "3.12")]
    assert not check.ok and [b.member for b in check.failing] == ["pkg/sm80.so"]
    assert len(check.binaries) == 3
    assert check.no_device_code == ("pkg-1.0-py3-none-any.whl:pkg/_host.so",)
    assert check.wheels == (WheelRead(wheel.name, mc.sha256_file(str(wheel)), 1),)
    monkeypatch.setattr(mc, "read_wheel", lambda *a: pytest.fail("read again"))
    assert mc.check_lock(lock, tmp_path / "cache", lambda *a: [wheel]) == check


def test_check_lock_records_the_platform_its_lock_names(tmp_path):
    # tools/lock_vllm.py writes the platform uv resolved for into the lock's first line; vLLM 0.19.1's locks say
    # "x86_64 manylinux_2_31" (its PyPI wheel is vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl), and the wheels
    # checked are the ones a manylinux_2_31 host installs, so the evidence must name that platform, not 2_28
    wheel = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    lock = tmp_path / "vllm-9.9-py3.12.txt"
    lock.write_text("# vLLM 9.9 for Python 3.12, x86_64 manylinux_2_31, wheels only, from PyPI.\n"
                    "pkg==1.0 --hash=sha256:" + "0" * 64 + "\n")
    check = mc.check_lock(lock, tmp_path / "cache", lambda *a: [wheel])
    assert check.platform == "manylinux_2_31_x86_64"
    data = json.loads(mc.render_evidence(check))
    assert data["platform"] == "manylinux_2_31_x86_64"
    path = mc.write_evidence(check, lock)
    assert mc.read_evidence(path).platform == "manylinux_2_31_x86_64"
    plain = tmp_path / "vllm-9.9-py3.11.txt"
    plain.write_text("pkg==1.0 --hash=sha256:" + "0" * 64 + "\n")  # a lock that does not say: PEP 600 tag of 2.28
    assert mc.check_lock(plain, tmp_path / "cache", lambda *a: [wheel]).platform == "manylinux_2_28_x86_64"


# -- verdicts of a lock, and the evidence -------------------------------------------------------------------------

def _check(lock: str = "vllm-0.10.2-py3.12.txt") -> LockCheck:
    w = ("vllm-0.10.2-cp38-abi3-manylinux1_x86_64.whl", "xformers-0.0.32.post1-cp39-abi3-manylinux_2_28_x86_64.whl",
         "nvidia_cufft_cu12-11.3.3.83-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "six-1.0-py3-none-any.whl")
    binaries = (CudaBinary(w[0], "vllm/_C.abi3.so", ("sm_70", "sm_80"), ("compute_90",)),
                CudaBinary(w[0], "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", ("sm_80",), ("compute_80",)),
                CudaBinary(w[1], "xformers/_C.so", ("sm_75", "sm_80", "sm_90a"), ("compute_80",)),
                CudaBinary(w[2], "nvidia/cufft/lib/libcufft.so.11", ("sm_52", "sm_70"), ("compute_70",), 23531))
    return LockCheck(lock, binaries, (), tuple(WheelRead(n, f"{i:064x}", i) for i, n in enumerate(w)))


def test_binaries_never_launched_on_volta_pass_and_a_limit_is_named():
    check = _check()
    assert check.ok and check.failing == ()
    assert [b.member for b in check.not_launched] == ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]
    assert [b.member for b in check.limits] == ["xformers/_C.so"]  # 0.10.2's vision encoders


def test_the_same_binary_fails_a_release_without_that_limit():
    # vLLM 0.8.5's V0 engine runs every decoder's attention through xformers on Volta: no limit applies there
    check = _check("vllm-0.8.5.post1-py3.12.txt")
    assert not check.ok and [b.member for b in check.failing] == ["xformers/_C.so"]


def test_evidence_round_trip(tmp_path):
    check = _check()
    lock = tmp_path / "vllm-0.10.2-py3.12.txt"
    path = mc.write_evidence(check, lock)
    assert path.name == "vllm-0.10.2-py3.12.sm70.json"
    data = json.loads(path.read_text())
    assert data["ok"] is True and data["limits"] == [f"{check.binaries[2].wheel}:xformers/_C.so"]
    assert data["reader"].startswith(f"cuobjdump {mc.CUOBJDUMP_VERSION} ")
    assert list(data["wheels"]) == [w.name for w in check.wheels]
    back = mc.read_evidence(path)
    assert back == check and mc.render_evidence(back) == path.read_text()
    fa2 = data["wheels"][check.binaries[1].wheel]["binaries"][1]
    assert fa2["runs_on_sm70"] is False and "compute capability >= 8" in fa2["not_launched"]


def test_evidence_of_another_schema_is_refused(tmp_path):
    path = tmp_path / "x.sm70.json"
    path.write_text(json.dumps({"schema": 0}))
    with pytest.raises(ValueError, match="regenerate it with tools/lock_vllm.py"):
        mc.read_evidence(path)


# -- the committed evidence ---------------------------------------------------------------------------------------

SUPPORTED = [(r, py) for r in VLLM_RELEASES.values() for py in r.pythons]


@pytest.mark.parametrize("release,python", SUPPORTED, ids=[f"{r.version}-py{py}" for r, py in SUPPORTED])
def test_committed_evidence_covers_exactly_the_locks_wheels_and_passes(release, python):
    lock = release.lock_file(python)
    check = mc.read_evidence(mc.evidence_path(lock))
    data = json.loads(mc.evidence_path(lock).read_text())
    assert check.lock == lock.name and data["reader"] == mc.reader_name()
    pins = {r.name: r for r in lock_requirements(lock)}
    seen = {}
    for w in check.wheels:
        name, version, _, _ = parse_wheel_filename(w.name)
        assert Version(pins[name].version) == version, w.name
        assert w.sha256 in pins[name].hashes, f"{w.name}: a file the lock does not allow"
        assert wheel_rank(w.name, python, lock_glibc(lock)) is not None, f"{w.name} does not install on CPython {python}"
        seen[name] = w.name
    assert set(seen) == set(pins), "one wheel per pin of the lock, no more"
    assert check.ok and data["ok"] is True and data["failing"] == []
    assert mc.render_evidence(check) == mc.evidence_path(lock).read_text(), "as tools/lock_vllm.py writes it"
    members = {b.member for b in check.binaries}
    assert {"torch/lib/libtorch_cuda.so", "vllm/_C.abi3.so"} <= members
    torch = next(b for b in check.binaries if b.member == "torch/lib/libtorch_cuda.so")
    assert "sm_70" in torch.sass  # docs/volta.md §3: the torch builds of both releases keep sm_70


@pytest.mark.parametrize("release,python", SUPPORTED, ids=[f"{r.version}-py{py}" for r, py in SUPPORTED])
def test_committed_evidence_names_the_platform_of_its_lock(release, python):
    # the lock's own first line says what uv resolved it for ("# vLLM 0.19.1 for Python 3.12, x86_64
    # manylinux_2_31, ..."); as a wheel platform tag (PEP 600) that is manylinux_2_31_x86_64
    lock = release.lock_file(python)
    header = lock.read_text().splitlines()[0]
    found = re.search(r"x86_64 (manylinux_\d+_\d+),", header)
    assert found, header
    data = json.loads(mc.evidence_path(lock).read_text())
    assert data["platform"] == f"{found.group(1)}_x86_64"
    assert data["platform"] == release.platform.split("-", 1)[1] + "_x86_64"  # uv's --python-platform
    if release.version == "0.19.1":  # its vLLM wheel needs glibc 2.31 (PyPI's file name)
        assert "vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl" in data["wheels"]
        assert data["platform"] == "manylinux_2_31_x86_64"


def test_failing_release_is_caught():
    # vLLM 0.21.0 with its PyPI torch 2.11.0 (CUDA 13.0 wheels): `tools/lock_vllm.py --sm70-candidate 0.21.0
    # --python 3.12 --exclude-newer 2026-05-16`. CUDA 13 cannot compile for sm_70 (CUDA 13.0 release notes;
    # docs/volta.md §2), so torch's own CUDA library must be among the failing binaries.
    check = mc.read_evidence(DATA / "vllm-0.21.0-py3.12.sm70.json")
    assert not check.ok
    failing = {b.member for b in check.failing}
    assert "torch/lib/libtorch_cuda.so" in failing and "vllm/_C.abi3.so" in failing
    assert all(not b.runs_on_sm70 for b in check.failing)


@pytest.mark.parametrize("lock,sass,ptx", [
    # each wheel's own xformers/cpp_lib.json: 0.0.29.post2 TORCH_CUDA_ARCH_LIST "6.0+PTX 7.0 7.5 8.0+PTX 9.0a",
    # 0.0.32.post1 "7.5 8.0+PTX 9.0a" (a "+PTX" architecture also keeps its PTX)
    ("vllm-0.8.5.post1-py3.12.txt", ("sm_60", "sm_70", "sm_75", "sm_80", "sm_90a"), ("compute_60", "compute_80")),
    ("vllm-0.10.2-py3.12.txt", ("sm_75", "sm_80", "sm_90a"), ("compute_80",)),
])
def test_committed_evidence_of_xformers_matches_its_build_record(lock, sass, ptx):
    check = mc.read_evidence(mc.evidence_path(VLLM_RELEASES[lock.split("-")[1]].lock_file(lock[-8:-4])))
    (xformers,) = [b for b in check.binaries if b.member == "xformers/_C.so"]
    assert (xformers.sass, xformers.ptx) == (sass, ptx)


def test_sm70_table_prints_each_binary_with_its_verdict():
    from tools.lock_vllm import describe_failure, sm70_table  # noqa: PLC0415 (the tool is not a package module)

    failing = mc.read_evidence(DATA / "vllm-0.21.0-py3.12.sm70.json")
    passing = mc.read_evidence(mc.evidence_path(VLLM_RELEASES["0.10.2"].lock_file("3.12")))
    lines = sm70_table([passing, failing]).splitlines()
    assert lines[0].startswith("vllm-0.10.2-py3.12.txt: ok (38 binaries")
    row = {line.split()[1]: line for line in lines if line.startswith("  ") and "standalone" not in line}
    assert row["xformers/_C.so"].split()[2] == "LIMIT" and "SASS sm_75 sm_80 sm_90a  PTX compute_80" in row["xformers/_C.so"]
    assert "vllm-0.21.0-py3.12.txt: FAILS" in "\n".join(lines)
    torch = [line for line in lines if "torch/lib/libtorch_cuda.so" in line]
    assert torch[0].split()[2] == "runs" and torch[1].split()[2] == "FAILS"
    assert "flashinfer_cubin-0.6.8.post1-py3-none-any.whl: 10560 standalone cubins" in "\n".join(lines)
    assert "torch/lib/libtorch_cuda.so: SASS sm_75 sm_80" in describe_failure(failing)


def test_lock_vllm_refuses_a_lock_whose_binaries_lack_sm70_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import roles.vllm.versions as versions  # noqa: PLC0415
    import tools.lock_vllm as tool  # noqa: PLC0415 (the tool is not a package module)

    release = versions.VllmRelease("0.21.0", "2.11.0", "13.0", "V1", ("3.12",), "2026-05-16")
    monkeypatch.setattr(versions, "LOCK_DIR", tmp_path)
    monkeypatch.setattr(tool, "LOCK_DIR", tmp_path)
    monkeypatch.setattr(tool, "VLLM_RELEASES", {"0.21.0": release})
    monkeypatch.setattr(tool, "TORCH_SM70", {("2.11", "12.6"): True})
    monkeypatch.setattr(tool.subprocess, "run", lambda *a, **k: type("R", (), {"stdout": f"uv {tool.UV_VERSION}"}))
    monkeypatch.setattr(tool, "compile_lock", lambda r, py: "torch==2.11.0\nnvidia-cuda-runtime-cu12==12.6.77\n")
    failing = mc.read_evidence(DATA / "vllm-0.21.0-py3.12.sm70.json")
    seen = []
    monkeypatch.setattr(tool, "machine_code", lambda lock, cache: seen.append(lock.read_text()) or failing)
    monkeypatch.setattr(tool.sys, "argv", ["lock_vllm.py", "--wheel-cache", str(tmp_path / "cache")])
    assert tool.main() == 1
    out = capsys.readouterr().out
    assert "vllm-0.21.0-py3.12.txt: refused, binaries without sm_70" in out and "torch/lib/libtorch_cuda.so" in out
    assert seen == ["torch==2.11.0\nnvidia-cuda-runtime-cu12==12.6.77\n"], "the fresh lock is what was checked"
    assert list(tmp_path.iterdir()) == [], "neither the lock nor its evidence is written"
