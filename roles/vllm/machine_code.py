"""The sm_70 check of machine code: does every CUDA binary that a vLLM lock installs carry code a V100 can run?

A wheel's ELF files (shared objects, executables) may embed fatbins: containers of SASS (machine code for one GPU
architecture, a cubin, "sm_80") and PTX (a virtual ISA the driver compiles at load time, "compute_80"). NVIDIA's
`cuobjdump --list-elf --list-ptx FILE` lists them. This module downloads a lock's wheels (hash-checked, the wheel
a host of the lock's platform, manylinux_2_28 or newer x86_64, with the lock's Python installs), runs cuobjdump on every ELF member of each wheel,
and records per binary the SASS architectures and PTX versions found, and whether compute capability 7.0 can run it.

What runs on compute capability 7.0 (NVIDIA, CUDA C++ Programming Guide, "Binary Compatibility" and "PTX
Compatibility", docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility; the same rule is coded in
LLVM's openmp/libomptarget/plugins-nextgen/cuda/src/rtl.cpp, reviews.llvm.org/D138600):
  - SASS for X.y runs only on devices of compute capability X.z with z >= y: sm_70 runs on 7.0 (and 7.2, 7.5);
    sm_72 and sm_75 do not run on 7.0, nor does sm_60 or sm_80 (another major).
  - Architecture-specific SASS (sm_90a, sm_100a: "a") runs only on that exact compute capability; family-specific
    SASS (sm_100f, CUDA 12.9+: "f") on the same major with an equal or higher minor (CUDA 12.9 release notes,
    "family-specific architecture features"; NVIDIA Blackwell compatibility guide).
  - PTX for compute_XY is compiled by the driver (JIT) for any device of compute capability >= X.Y: compute_70 and
    lower run on 7.0, compute_75 and higher do not. Arch-specific PTX (compute_90a) runs on that exact device only.

A lock passes when every binary with device code runs on 7.0, except binaries in NOT_LAUNCHED_ON_VOLTA: code that
vLLM loads (or merely ships) but never launches on a GPU below its minimum compute capability, each with its source.
A binary whose kernels are never launched costs nothing: the CUDA driver only refuses a kernel at launch ("no kernel
image is available for execution on the device"), and since CUDA 12.2 modules load lazily (CUDA_MODULE_LOADING=LAZY
by default; CUDA C++ Programming Guide, "Lazy Loading").

Evidence: files/vllm/vllm-<version>-py<python>.sm70.json beside each lock (write_evidence / read_evidence), with the
reader and its version. tools/lock_vllm.py runs the check when it makes a lock and refuses a lock that fails.
"""

from __future__ import annotations

import fnmatch
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterable, Iterator

from roles.engines import sha256_file
from roles.vllm.versions import MANYLINUX_GLIBC, lock_platform

#: The reader: cuobjdump from NVIDIA's PyPI wheel (pyproject.toml's dev group pins it; `uv sync` installs it).
#: CUDA 13's cuobjdump still lists sm_70 cubins (it only stopped compiling for them) and reads the compressed
#: fatbins of CUDA 12.8+ builds.
CUOBJDUMP_DIST = "nvidia-cuda-cuobjdump"
CUOBJDUMP_VERSION = "13.5.37"

_ELF_MAGIC = b"\x7fELF"
#: A fatbin's header: magic 0xBA55ED50, version 1, header size 16, then the size of what follows (u64), little
#: endian (CUDA's include/fatbinary_section.h and fatbinary.h: FATBIN_MAGIC, the fatBinaryHeader layout).
_FATBIN_HEADER = struct.Struct("<IHHQ")
_FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
_LISTED = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.((?:sm|compute)_(\d+)([af]?))\.(cubin|ptx)$")
_ARCH = re.compile(r"^(sm|compute)_(\d+)([af]?)$")
_LOCK_NAME = re.compile(r"^vllm-(?P<version>[^-]+)-py(?P<python>3\.\d+)\.txt$")

#: Binaries without code for 7.0 that are never launched on it, as (distribution, member glob) -> why, with the
#: source (the code of the wheel itself). Only these, and VOLTA_LIMITS, may lack sm_70 in a lock that passes.
NOT_LAUNCHED_ON_VOLTA: dict[tuple[str, str], str] = {
    ("vllm", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"):
        "FlashAttention 2 needs compute capability 8.0: vllm/vllm_flash_attn/flash_attn_interface.py "
        "_is_fa2_supported ('FA2 is only supported on devices with compute capability >= 8'); vLLM picks "
        "FLASH_ATTN only from 8.0 (vllm/platforms/cuda.py get_attn_backend_cls, has_device_capability(80))",
    ("vllm", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"):
        "FlashAttention 3 runs on compute capability 9.x only: flash_attn_interface.py _is_fa3_supported, "
        "vllm/attention/utils/fa_utils.py get_flash_attn_version (fa_version 3 only when major == 9)",
    ("vllm", "vllm/_flashmla_C.abi3.so"):
        "FlashMLA is Hopper-only: vllm/attention/ops/flashmla.py is_flashmla_supported ('FlashMLA is only "
        "supported on Hopper devices.')",
    ("vllm", "vllm/_flashmla_extension_C.abi3.so"):
        "FlashMLA's fp8/sparse kernels (0.19.1) run on Hopper and Blackwell only: vllm/v1/attention/ops/flashmla.py "
        "is_flashmla_dense_supported ('FlashMLA Dense is only supported on Hopper devices.', capability family 90) "
        "and is_flashmla_sparse_supported (families 90 and 100)",
    ("xformers", "xformers/flash_attn_3/_C.so"):
        "xformers' FlashAttention 3 operator needs compute capability 8.0: xformers/ops/fmha/flash3.py "
        "CUDA_MINIMUM_COMPUTE_CAPABILITY = (8, 0) in 0.0.32.post1, checked by xformers' dispatcher (fmha/common.py)",
    ("xformers", "xformers/_C_flashattention3.so"):
        "xformers' FlashAttention 3 operator (its older file name) needs compute capability 9.0: "
        "xformers/ops/fmha/flash3.py CUDA_MINIMUM_COMPUTE_CAPABILITY = (9, 0) in 0.0.29.post2, checked by "
        "xformers' dispatcher (fmha/common.py)",
    ("nvidia-cufft-cu12", "nvidia/cufft/lib/libcufftw.so.*"):
        "the FFTW interface of cuFFT: no torch or vLLM binary links it (torch/lib/libtorch_cuda.so needs "
        "libcufft.so.11 only: `readelf -d`); its .nv_fatbin is one sm_52 stub, as in libcufft.so.11",
}

#: Binaries without code for 7.0 that a release launches only for one feature, as (vLLM version, distribution,
#: member glob) -> the feature and its source. The lock passes, LockCheck.limits names them, and that feature
#: fails on a V100 with this release (the toolkit must refuse it there; docs/vllm-sm70.md).
VOLTA_LIMITS: dict[tuple[str, str, str], str] = {
    ("0.10.2", "xformers", "xformers/_C.so"):
        "vision encoders: below compute capability 8.0 vLLM 0.10.2 runs ViT attention through xformers "
        "(vllm/platforms/cuda.py get_vit_attn_backend: 'Fallback for Volta/Turing GPUs' -> XFORMERS; "
        "vllm/attention/layer.py MultiHeadAttention -> xops.memory_efficient_attention_forward), whose cutlass "
        "operator (xformers/ops/fmha/common.py: minimum compute capability 5.0) launches kernels of xformers/_C.so; "
        "xformers 0.0.32.post1 was built for TORCH_CUDA_ARCH_LIST '7.5 8.0+PTX 9.0a' (its xformers/cpp_lib.json). "
        "Text-only models use TRITON_ATTN (Triton compiles for sm_70 at run time) and never call xformers",
}


class MachineCodeError(RuntimeError):
    """The reader is missing or failed on a file (cuobjdump's own message included)."""


def _arch(name: str) -> tuple[str, int, int, str]:
    """("sm"|"compute", major, minor, suffix "" | "a" | "f") of "sm_70", "sm_100a", "compute_90". ValueError else."""
    m = _ARCH.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a GPU architecture such as sm_70, sm_90a or compute_70")
    number = m.group(2)  # the last digit is the minor: sm_70 -> 7.0, sm_100 -> 10.0, sm_120 -> 12.0
    return m.group(1), int(number[:-1]), int(number[-1]), m.group(3)


def sass_runs_on(sass: str, capability: tuple[int, int]) -> bool:
    """Whether SASS for `sass` ("sm_75", "sm_90a") runs on a device of compute capability `capability` ((7, 0)):
    same major and a minor at or below the device's; an "a" (architecture-specific) cubin only on its exact
    compute capability. Source: the module docstring (CUDA C++ Programming Guide, "Binary Compatibility")."""
    _, major, minor, suffix = _arch(sass)
    if suffix == "a":
        return (major, minor) == tuple(capability)
    return major == capability[0] and minor <= capability[1]


def ptx_runs_on(ptx: str, capability: tuple[int, int]) -> bool:
    """Whether PTX for `ptx` ("compute_70") can be compiled by the driver for compute capability `capability`:
    any PTX version at or below it; an arch-specific one ("compute_90a") only for that exact compute capability.
    Source: the module docstring (CUDA C++ Programming Guide, "PTX Compatibility")."""
    _, major, minor, suffix = _arch(ptx)
    if suffix:
        return (major, minor) == tuple(capability)
    return (major, minor) <= tuple(capability)


@dataclass(frozen=True)
class CudaBinary:
    """One ELF file with device code. wheel: the wheel's file name; member: the path inside the wheel; sass: the
    SASS architectures of its cubins ("sm_70", "sm_90a"), sorted by compute capability, without repeats; ptx: the
    PTX versions ("compute_80")."""

    wheel: str
    member: str
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    #: fatbins found outside the ELF's .nv_fatbin section and read as well (a library that loads its own kernels,
    #: such as cuFFT, whose .nv_fatbin holds one sm_52 stub): 0 for most binaries
    embedded: int = 0
    #: entries of fatbins that cuobjdump refused ("Invalid ELF": cuBLAS 12.4.5.8 has 3 in libcublas.so.12, 57 in
    #: libcublasLt.so.12), their architectures taken from the entry headers instead (_entry_archs). 0 for most
    unreadable: int = 0

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """Some SASS or PTX of it runs on compute capability `capability` (sass_runs_on, ptx_runs_on)."""
        return (any(sass_runs_on(a, capability) for a in self.sass)
                or any(ptx_runs_on(p, capability) for p in self.ptx))

    @property
    def runs_on_sm70(self) -> bool:
        """Runs on a V100 (compute capability 7.0): sm_70 SASS, or PTX of compute_70 or lower for the driver's JIT."""
        return self.runs_on((7, 0))

    @property
    def distribution(self) -> str:
        """The wheel's distribution name, normalized ("nvidia-cublas-cu12")."""
        return re.sub(r"[-_.]+", "-", self.wheel.split("-", 1)[0]).lower()

    @property
    def not_launched_reason(self) -> str | None:
        """Why this binary is never launched on Volta (NOT_LAUNCHED_ON_VOLTA), or None."""
        for (dist, pattern), why in NOT_LAUNCHED_ON_VOLTA.items():
            if dist == self.distribution and fnmatch.fnmatchcase(self.member, pattern):
                return why
        return None

    def limit(self, vllm_version: str) -> str | None:
        """The one feature of vLLM `vllm_version` that launches this binary (VOLTA_LIMITS), or None."""
        for (version, dist, pattern), what in VOLTA_LIMITS.items():
            if (version, dist) == (vllm_version, self.distribution) and fnmatch.fnmatchcase(self.member, pattern):
                return what
        return None


@dataclass(frozen=True)
class WheelRead:
    """One wheel a lock installs, as read: file name, sha256 (hex), how many of its ELF members hold no device code
    (CPython extensions, host-only libraries), and its standalone cubins."""

    name: str
    sha256: str
    elf_without_device_code: int
    #: standalone cubins (members that are device code themselves) as ("SASS PTX" archs, how many), e.g.
    #: (("sm_100", 5210), ("sm_90a", 30)); not part of the verdict: their library loads one per architecture
    cubins: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class LockCheck:
    """The sm_70 check of one lock. lock: the lock file's name (vllm-<version>-py<python>.txt); binaries: every ELF
    member with device code of every wheel the lock installs; no_device_code: "<wheel>:<member>" of ELF members
    without a fatbin (empty when read back from evidence, which keeps only their number per wheel); wheels: every
    wheel read, in lock order; platform: the wheel platform tag the lock was resolved for and its wheels chosen for
    (roles/vllm/versions.py lock_platform: "manylinux_2_31_x86_64" for vLLM 0.19.1)."""

    lock: str
    binaries: tuple[CudaBinary, ...]
    no_device_code: tuple[str, ...]
    wheels: tuple[WheelRead, ...] = ()
    platform: str = "manylinux_{}_{}_x86_64".format(*MANYLINUX_GLIBC)

    @property
    def vllm_version(self) -> str:
        """The vLLM version of the lock's name ("" for another name)."""
        m = _LOCK_NAME.match(self.lock)
        return m.group("version") if m else ""

    @property
    def failing(self) -> tuple[CudaBinary, ...]:
        """Binaries without code for compute capability 7.0 that are neither in NOT_LAUNCHED_ON_VOLTA nor in
        VOLTA_LIMITS for this release."""
        return tuple(b for b in self.binaries if not b.runs_on_sm70 and b.not_launched_reason is None
                     and b.limit(self.vllm_version) is None)

    @property
    def not_launched(self) -> tuple[CudaBinary, ...]:
        """Binaries without code for 7.0 that vLLM never launches there (NOT_LAUNCHED_ON_VOLTA)."""
        return tuple(b for b in self.binaries if not b.runs_on_sm70 and b.not_launched_reason is not None)

    @property
    def limits(self) -> tuple[CudaBinary, ...]:
        """Binaries without code for 7.0 that this release launches for one feature only (VOLTA_LIMITS)."""
        return tuple(b for b in self.binaries if not b.runs_on_sm70 and b.not_launched_reason is None
                     and b.limit(self.vllm_version) is not None)

    @property
    def ok(self) -> bool:
        """Every binary runs on compute capability 7.0, is never launched there, or is a listed limit."""
        return not self.failing


# -- the reader -------------------------------------------------------------------------------------------------

def cuobjdump() -> tuple[Path, str]:
    """(path, version) of the pinned cuobjdump. Raises MachineCodeError when it is not installed at CUOBJDUMP_VERSION
    (fix: `uv sync`, which installs pyproject.toml's dev group)."""
    try:
        dist = metadata.distribution(CUOBJDUMP_DIST)
    except metadata.PackageNotFoundError:
        dist = None
    if dist is None or dist.version != CUOBJDUMP_VERSION:
        found = f"{dist.version} is installed" if dist else "it is not installed"
        raise MachineCodeError(f"{CUOBJDUMP_DIST}=={CUOBJDUMP_VERSION} is needed to read fatbins and {found}: "
                               "run tools/setup.sh (uv sync installs the dev group)")
    paths = [f for f in dist.files or () if f.name == "cuobjdump" and f.parent.name == "bin"]
    if not paths:
        raise MachineCodeError(f"{CUOBJDUMP_DIST} {dist.version} has no bin/cuobjdump (not a Linux wheel?)")
    return Path(str(dist.locate_file(paths[0]))), dist.version


def parse_listing(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(SASS architectures, PTX versions) from `cuobjdump --list-elf --list-ptx` output: lines such as
    "ELF file    1: _C.abi3.1.sm_70.cubin" and "PTX file    3: _C.abi3.3.sm_90.ptx" (PTX is named by its
    target: sm_90 -> "compute_90"). Each sorted by (major, minor, suffix), without repeats; other lines ignored."""
    sass, ptx = set(), set()
    for line in text.splitlines():
        m = _LISTED.match(line.strip())
        if not m:
            continue
        kind, number, suffix = m.group(1), m.group(3), m.group(4)
        (sass if kind == "ELF" else ptx).add(("sm_" if kind == "ELF" else "compute_") + number + suffix)
    return _sorted(sass), _sorted(ptx)


def _sorted(archs: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(archs), key=lambda a: _arch(a)[1:]))


def read_elf(path: Path, tool: Path) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(sass, ptx) of an ELF file on disk (parse_listing), or None when it holds no device code. Raises
    MachineCodeError with cuobjdump's message for anything else it refuses (a damaged fatbin)."""
    run = subprocess.run([str(tool), "--list-elf", "--list-ptx", str(path)], capture_output=True, text=True)
    if run.returncode != 0:
        if "does not contain device code" in run.stderr:
            return None
        raise MachineCodeError(f"cuobjdump failed on {path} (exit {run.returncode}): {run.stderr.strip()}")
    return parse_listing(run.stdout)


def _section(buf: mmap.mmap, name: bytes) -> tuple[int, int] | None:
    """(start, end) file offsets of the ELF64 little-endian section `name`, or None (no such section, or not an
    ELF64 LE file). Layout: the System V gABI ELF header (e_shoff at 0x28, e_shentsize/e_shnum/e_shstrndx at
    0x3A-0x3F) and Elf64_Shdr (sh_name +0, sh_offset +0x18, sh_size +0x20)."""
    if buf[:6] != b"\x7fELF\x02\x01":
        return None
    shoff, = struct.unpack_from("<Q", buf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    if not shoff or shstrndx >= shnum or shoff + shnum * shentsize > len(buf):
        return None
    headers = [struct.unpack_from("<I20xQQ", buf, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][1]
    for name_at, offset, size in headers:
        end = buf.find(b"\0", strtab + name_at)
        if buf[strtab + name_at:end] == name:
            return offset, offset + size
    return None


def _fatbins(buf: mmap.mmap, outside: tuple[int, int] = (0, 0)) -> Iterator[tuple[int, int]]:
    """(start, end) of every fatbin in buf that does not start within `outside` (a section's range). A fatbin is
    found by its header: magic, version 1, header size 16, a size that fits in the file."""
    at = buf.find(_FATBIN_MAGIC)
    while at >= 0:
        _, version, header, size = _FATBIN_HEADER.unpack_from(buf, at) if at + 16 <= len(buf) else (0,) * 4
        end = at + header + size
        if version == 1 and header == 16 and 0 < size and end <= len(buf):
            if not outside[0] <= at < outside[1]:
                yield at, end
            at = buf.find(_FATBIN_MAGIC, end)
        else:
            at = buf.find(_FATBIN_MAGIC, at + 4)


def _entry_archs(fatbin: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sass, ptx) as a fatbin's entry headers declare them, without cuobjdump: each entry starts with kind (u16:
    1 PTX, 2 ELF/cubin), header size (u32 at +4), payload size (u64 at +8) and the architecture (u32 at +28, 70 for
    sm_70). Layout: n-eiling/cuda-fatbin-decompression, fatbin-decompress.h (struct fat_text_header). Only for the
    fatbins cuobjdump refuses."""
    sass, ptx = set(), set()
    at, end = 16, len(fatbin)
    while at + 32 <= end:
        kind, _, header, size = struct.unpack_from("<HHIQ", fatbin, at)
        arch, = struct.unpack_from("<I", fatbin, at + 28)
        if header < 32 or kind not in (1, 2):
            break
        (ptx if kind == 1 else sass).add(f"{'compute' if kind == 1 else 'sm'}_{arch}")
        at += header + size
    return _sorted(sass), _sorted(ptx)


def read_fatbins(path: Path, tool: Path, scratch: Path,
                 outside_only: bool) -> tuple[tuple[str, ...], tuple[str, ...], int, int]:
    """(sass, ptx, fatbins read, entries refused) of the fatbins in the file at `path`: all of them, or with
    outside_only those outside its .nv_fatbin section (a library's own kernel store, such as cuFFT's). They are
    written one after another (8-byte aligned, as .nv_fatbin holds them) to a file cuobjdump reads like a .fatbin.
    Should cuobjdump refuse that file, each fatbin is read alone, and one it refuses counts by its entry headers
    (_entry_archs). Raises MachineCodeError only when cuobjdump fails in another way."""
    out = scratch / "fatbins.fatbin"
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        skip = (_section(buf, b".nv_fatbin") or (0, 0)) if outside_only else (0, 0)
        spans = list(_fatbins(buf, skip))
        if not spans:
            return (), (), 0, 0
        with open(out, "wb") as dst:
            for start, end in spans:
                dst.write(buf[start:end])
                dst.write(b"\0" * (-dst.tell() % 8))
        try:
            found = read_elf(out, tool)
            return (*(found or ((), ())), len(spans), 0)
        except MachineCodeError:
            pass
        sass: set[str] = set()
        ptx: set[str] = set()
        refused = 0
        for start, end in spans:
            out.write_bytes(buf[start:end])
            try:
                found = read_elf(out, tool) or ((), ())
            except MachineCodeError:
                found = _entry_archs(buf[start:end])
                refused += len(found[0]) + len(found[1])
            sass |= set(found[0])
            ptx |= set(found[1])
    out.unlink(missing_ok=True)
    return _sorted(sass), _sorted(ptx), len(spans), refused


_EM_CUDA = 190  # e_machine of a cubin (a device-code ELF on its own), System V gABI machine numbers


def read_wheel(wheel: Path, tool: Path,
               scratch: Path) -> tuple[list[CudaBinary], list[str], dict[str, int]]:
    """What one wheel holds: (binaries with device code, ELF members without it, standalone cubins counted by
    "SASS PTX" architectures). Every member that starts with the ELF magic is extracted into `scratch` (a
    directory) and read with cuobjdump (read_elf), together with the fatbins it holds outside .nv_fatbin
    (read_fatbins); when cuobjdump refuses the file, its fatbins are read one by one. A member that is itself a
    cubin (e_machine EM_CUDA: FlashInfer's kernel store) is counted, not listed: the library that loads it picks a
    cubin per GPU architecture. Raises MachineCodeError when cuobjdump fails otherwise."""
    binaries: list[CudaBinary] = []
    plain: list[str] = []
    cubins: dict[str, int] = {}
    target = scratch / "elf"
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir() or info.file_size < 64:
                continue
            with zf.open(info) as f:
                head = f.read(20)
            if head[:4] != _ELF_MAGIC:
                continue
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            try:
                if struct.unpack_from("<H", head, 18)[0] == _EM_CUDA:
                    found = read_elf(target, tool) or ((), ())
                    key = " ".join(found[0] + found[1])
                    cubins[key] = cubins.get(key, 0) + 1
                    continue
                try:
                    found, whole = read_elf(target, tool), False
                except MachineCodeError:
                    found, whole = None, True  # cuobjdump refused an entry: read all fatbins one by one
                sass, ptx, embedded, unreadable = read_fatbins(target, tool, scratch, outside_only=not whole)
            finally:
                target.unlink()
            if found is None and not (sass or ptx):
                plain.append(info.filename)
                continue
            if found:
                sass, ptx = _sorted(sass + found[0]), _sorted(ptx + found[1])
            binaries.append(CudaBinary(wheel.name, info.filename, sass, ptx, 0 if whole else embedded, unreadable))
    return binaries, plain, dict(sorted(cubins.items()))


def _cached_read(wheel: Path, cache_dir: Path, tool: Path,
                 version: str) -> tuple[str, list[CudaBinary], list[str], dict[str, int]]:
    """(sha256, *read_wheel(...)), remembered per wheel sha256 and reader version in
    cache_dir/machine-code/<sha256>.json: a wheel shared by several locks (nvidia-* py3-none wheels) is read once."""
    sha = sha256_file(str(wheel))
    memo = cache_dir / "machine-code" / f"{sha}.json"
    reader = f"cuobjdump {version}, embedded fatbins"
    if memo.is_file():
        data = json.loads(memo.read_text())
        if data.get("reader") == reader and "cubins" in data:
            return (sha, [CudaBinary(wheel.name, m, tuple(s), tuple(p), e, u) for m, s, p, e, u in data["binaries"]],
                    list(data["no_device_code"]), dict(data["cubins"]))
    memo.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=memo.parent) as scratch:
        binaries, plain, cubins = read_wheel(wheel, tool, Path(scratch))
    tmp = memo.with_suffix(".part")
    tmp.write_text(json.dumps({"reader": reader, "wheel": wheel.name, "no_device_code": plain, "cubins": cubins,
                               "binaries": [[b.member, b.sass, b.ptx, b.embedded, b.unreadable] for b in binaries]}))
    os.replace(tmp, memo)
    return sha, binaries, plain, cubins


def lock_python(lock_path: Path) -> str:
    """The Python version of a lock from its name, files/vllm/vllm-<version>-py<python>.txt ("3.12"). Raises
    ValueError for another name."""
    m = _LOCK_NAME.match(Path(lock_path).name)
    if not m:
        raise ValueError(f"{lock_path}: not a lock name of tools/lock_vllm.py (vllm-<version>-py<3.N>.txt)")
    return m.group("python")


#: Downloads the wheels of a lock for one Python into a directory and returns their paths: (lock, python, dest).
#: tools/lock_vllm.py passes v100kit.offline_pypi.fill_wheels (hash-checked, the wheel the host installs; roles
#: may not import v100kit: pyproject.toml's import contracts).
Fetch = Callable[[Path, str, Path], list[Path]]


def check_lock(lock_path: Path, cache_dir: Path, fetch: Fetch, python: str | None = None) -> LockCheck:
    """The sm_70 check of one lock (files/vllm/vllm-<version>-py<python>.txt, or any engine's lock given its
    `python`, as roles/lmdeploy/machine_code.py does): fetch(lock, python, cache_dir) downloads its wheels
    (hash-checked; reused when already in cache_dir), then every ELF member of every wheel is read with the pinned
    cuobjdump (results kept per wheel sha256 under cache_dir/machine-code).

    Returns a LockCheck (binaries in lock order, then member order; platform from the lock's first line). Raises
    ValueError for a lock name that names no Python (python None: a vLLM lock's name), MachineCodeError when
    cuobjdump is missing or fails, and what fetch raises (OSError for the network, ValueError for a hash
    mismatch)."""
    lock_path = Path(lock_path)
    tool, version = cuobjdump()
    wheels = fetch(lock_path, python or lock_python(lock_path), Path(cache_dir))
    binaries: list[CudaBinary] = []
    plain: list[str] = []
    read: list[WheelRead] = []
    for wheel in wheels:
        sha, found, without, cubins = _cached_read(Path(wheel), Path(cache_dir), tool, version)
        binaries += found
        plain += [f"{Path(wheel).name}:{m}" for m in without]
        read.append(WheelRead(Path(wheel).name, sha, len(without), tuple(cubins.items())))
    return LockCheck(lock_path.name, tuple(binaries), tuple(plain), tuple(read), lock_platform(lock_path))


# -- evidence ---------------------------------------------------------------------------------------------------

EVIDENCE_SCHEMA = 1


def evidence_path(lock_path: Path) -> Path:
    """files/vllm/vllm-<version>-py<python>.sm70.json beside files/vllm/vllm-<version>-py<python>.txt."""
    lock_path = Path(lock_path)
    return lock_path.with_name(lock_path.name.removesuffix(".txt") + ".sm70.json")


def reader_name() -> str:
    """What read the fatbins, as the evidence records it."""
    return (f"cuobjdump {CUOBJDUMP_VERSION} (PyPI {CUOBJDUMP_DIST}) --list-elf --list-ptx, on each ELF member "
            "and on the fatbins it holds outside .nv_fatbin")


def render_evidence(check: LockCheck) -> str:
    """The evidence of a check as JSON text: the lock, its platform, the reader, the verdict, and per wheel (lock order) its
    sha256, its number of ELF members without device code, its standalone cubins by architecture, and one line per
    binary: member, sass, ptx, runs_on_sm70, and where they apply embedded (fatbins outside .nv_fatbin),
    unreadable (entries cuobjdump refused, read from their headers), not_launched or limit (why)."""
    by_wheel: dict[str, list[CudaBinary]] = {}
    for b in check.binaries:
        by_wheel.setdefault(b.wheel, []).append(b)
    head = {"schema": EVIDENCE_SCHEMA, "lock": check.lock, "platform": check.platform, "reader": reader_name(),
            "ok": check.ok, "failing": [f"{b.wheel}:{b.member}" for b in check.failing],
            "limits": [f"{b.wheel}:{b.member}" for b in check.limits]}
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()] + [' "wheels": {']
    for i, w in enumerate(check.wheels):
        comma = "," if i < len(check.wheels) - 1 else ""
        entry = {"sha256": w.sha256, "elf_without_device_code": w.elf_without_device_code,
                 **({"cubins": dict(w.cubins)} if w.cubins else {})}
        found = by_wheel.get(w.name, [])
        if not found:
            lines.append(f"  {json.dumps(w.name)}: {json.dumps(entry)}{comma}")
            continue
        lines.append(f"  {json.dumps(w.name)}: {json.dumps(entry)[:-1]}, \"binaries\": [")
        for j, b in enumerate(found):
            record = {"member": b.member, "sass": list(b.sass), "ptx": list(b.ptx), "runs_on_sm70": b.runs_on_sm70}
            if b.embedded:
                record["embedded"] = b.embedded
            if b.unreadable:
                record["unreadable"] = b.unreadable
            if not b.runs_on_sm70 and b.not_launched_reason:
                record["not_launched"] = b.not_launched_reason
            elif not b.runs_on_sm70 and b.limit(check.vllm_version):
                record["limit"] = b.limit(check.vllm_version)
            lines.append(f"   {json.dumps(record)}{',' if j < len(found) - 1 else ''}")
        lines.append(f"  ]}}{comma}")
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def write_evidence(check: LockCheck, lock_path: Path) -> Path:
    """Write render_evidence(check) to evidence_path(lock_path); returns that path."""
    path = evidence_path(lock_path)
    path.write_text(render_evidence(check))
    return path


def read_evidence(path: Path) -> LockCheck:
    """A LockCheck from an evidence file (no_device_code stays empty: the file keeps only counts). The verdicts
    are computed again from sass and ptx, not taken from the file. Raises OSError, ValueError (not JSON, or another
    schema: regenerate with tools/lock_vllm.py) or KeyError for a file without the fields above."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != EVIDENCE_SCHEMA:
        raise ValueError(f"{path}: evidence schema {data.get('schema')!r}, expected {EVIDENCE_SCHEMA}: regenerate it "
                         "with tools/lock_vllm.py")
    wheels, binaries = [], []
    for name, entry in data["wheels"].items():
        wheels.append(WheelRead(name, entry["sha256"], entry["elf_without_device_code"],
                                tuple(entry.get("cubins", {}).items())))
        binaries += [CudaBinary(name, b["member"], tuple(b["sass"]), tuple(b["ptx"]), b.get("embedded", 0),
                                b.get("unreadable", 0)) for b in entry.get("binaries", ())]
    return LockCheck(data["lock"], tuple(binaries), (), tuple(wheels), data["platform"])
