"""The llama.cpp build's CMake arguments against the names llama.cpp itself declares (issue 14: the mutation run
found that a misspelt or lower-cased option, or a value CMake reads differently, passed every test).

Independent sources: the option() / llama_option_depr() declarations in the pinned trees' CMake files (read from
the real sdists where this machine has them, else skipped), CMake's documented CMAKE_BUILD_TYPE values, and the
Debian package layout of the compilers (gcc-N installs /usr/bin/gcc-N beside g++-N's /usr/bin/g++-N)."""

from __future__ import annotations

import re
import tarfile

import pytest

from roles.cuda.versions import DISTRO_TOOLKITS, NVIDIA_TOOLKITS
from roles.llama_cpp.decide import cmake_args
from roles.settings import load_settings
from tests.unit.test_llama_cpp_tree import archive

#: CMake's own variables the build sets (cmake-variables(7)); their names are not declared by llama.cpp
CMAKE_VARIABLES = {"CMAKE_BUILD_TYPE", "CMAKE_CUDA_ARCHITECTURES", "CMAKE_CUDA_COMPILER", "CMAKE_CUDA_HOST_COMPILER",
                   "CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER", "CMAKE_BUILD_WITH_INSTALL_RPATH", "CMAKE_INSTALL_RPATH"}
TOOLKITS = [*DISTRO_TOOLKITS.values(), *NVIDIA_TOOLKITS.values()]


def declared_options(version: str) -> set[str]:
    """Every option llama.cpp's CMake files of that sdist declare (deprecated ones included: still read)."""
    names: set[str] = set()
    with tarfile.open(archive(version)) as tar:
        for m in tar.getmembers():
            if m.isfile() and (m.name.endswith("CMakeLists.txt") or m.name.endswith(".cmake")):
                text = tar.extractfile(m).read().decode(errors="replace")
                names |= set(re.findall(r"\boption\(\s*([A-Z][A-Z0-9_]+)", text))
                names |= set(re.findall(r"\bllama_option_depr\(\s*\w+\s+([A-Z][A-Z0-9_]+)", text))
    return names


def as_dict(args: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for a in args:
        m = re.fullmatch(r"-D([A-Za-z0-9_]+)=(.*)", a)
        assert m, f"{a!r} is a -DNAME=VALUE definition"
        out[m.group(1)] = m.group(2)
    return out


@pytest.mark.parametrize("version", ["0.3.16", "0.3.36"])
@pytest.mark.parametrize("all_quants", [True, False])
def test_every_option_is_one_the_tree_declares_with_a_cmake_boolean(version, all_quants):
    options = declared_options(version)
    settings = load_settings("h", {"llama_cpp_fa_all_quants": all_quants})
    for tk in TOOLKITS:
        args = as_dict(cmake_args(settings, tk, ("70",)))
        ours = {k: v for k, v in args.items() if k not in CMAKE_VARIABLES}
        # LLAMA_USE_PREBUILT_UI is newer than 0.3.16 (an unknown -D is ignored there, with a warning)
        unknown = set(ours) - options - ({"LLAMA_USE_PREBUILT_UI"} if version == "0.3.16" else set())
        assert not unknown, f"options llama.cpp {version} does not declare: {unknown}"
        assert all(v in ("ON", "OFF") for v in ours.values()), ours
        assert ours["GGML_CUDA"] == "ON" and ours["GGML_CUDA_FA_ALL_QUANTS"] == ("ON" if all_quants else "OFF")
        # the server only, no test binaries, no build-time downloads (curl, the prebuilt web UI), ccache on
        assert (ours["LLAMA_BUILD_SERVER"], ours["LLAMA_BUILD_TESTS"], ours["LLAMA_CURL"]) == ("ON", "OFF", "OFF")
        assert (ours["GGML_CCACHE"], ours["LLAMA_USE_PREBUILT_UI"]) == ("ON", "OFF")


@pytest.mark.parametrize("tk", TOOLKITS, ids=lambda tk: f"{tk.source}-{tk.version}-{tk.host_compiler}")
def test_cmakes_own_variables_name_the_toolkit_and_its_host_compiler_pair(tk):
    args = as_dict(cmake_args(load_settings("h", {}), tk, ("70", "75")))
    assert set(args) >= CMAKE_VARIABLES
    assert args["CMAKE_BUILD_TYPE"] == "Release"  # one of Debug, Release, RelWithDebInfo, MinSizeRel
    assert args["CMAKE_CUDA_ARCHITECTURES"] == "70;75"  # CMake's list syntax
    assert args["CMAKE_CUDA_COMPILER"] == tk.nvcc
    n = tk.host_compiler.removeprefix("g++-")
    assert args["CMAKE_CUDA_HOST_COMPILER"] == args["CMAKE_CXX_COMPILER"] == f"/usr/bin/g++-{n}"
    assert args["CMAKE_C_COMPILER"] == f"/usr/bin/gcc-{n}"
    assert (args["CMAKE_BUILD_WITH_INSTALL_RPATH"], args["CMAKE_INSTALL_RPATH"]) == ("ON", "$ORIGIN")
