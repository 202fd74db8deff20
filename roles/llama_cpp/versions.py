"""The pinned llama.cpp source and the CUDA architectures each toolkit can build."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A llama.cpp source archive: `ref` (name used in the install prefix), `url`, `sha256`, and `subdir`, the
    directory inside the archive with llama.cpp's top-level CMakeLists.txt (None: found by looking)."""

    ref: str
    url: str
    sha256: str
    subdir: str | None = None
    flash_attn_style: str = "value"  # "value": -fa on|off|auto (since about b6327); "flag": a bare -fa


#: The default source: the llama.cpp tree vendored in the llama-cpp-python 0.3.16 sdist on PyPI. PyPI publishes
#: its sha256 (checked 2026-11-29), so the default is verifiable byte for byte; a GitHub tag archive has no
#: published checksum. Pin a release tag instead with llama_cpp_ref + llama_cpp_source + llama_cpp_source_sha256.
DEFAULT_SOURCE = Source(
    ref="pypi-0.3.16",
    url="https://files.pythonhosted.org/packages/e4/b4/c8cd17629ced0b9644a71d399a91145aedef109c0333443bef015e45b704/"
        "llama_cpp_python-0.3.16.tar.gz",
    sha256="34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6",
    subdir="llama_cpp_python-0.3.16/vendor/llama.cpp",
    flash_attn_style="flag",  # its common/arg.cpp parses a bare -fa (checked in the sdist)
)

#: Lowest and highest real architecture (sm_NN) each CUDA toolkit can compile for. CUDA 12.0 removed Kepler
#: (sm_35/37); 11.8 added sm_89/sm_90; 12.8 added sm_100/120; 13.0 removed sm_50..sm_72. (CUDA release notes; H)
CUDA_ARCH_RANGE: dict[str, tuple[int, int]] = {
    "11.7": (35, 87), "11.8": (35, 90), "12.1": (50, 90), "12.4": (50, 90), "12.6": (50, 90), "12.8": (50, 120),
}
