"""Plan-level tests (facts in, commands out): a split GGUF (NAME-00001-of-0000N.gguf). llama.cpp loads a split model
from its first part and opens the others by name in the same directory (src/llama.cpp llama_split_path,
"%s-%05d-of-%05d.gguf"; src/llama-model-loader.cpp), so every part goes to the host, each checked against its own
sha256 (model_parts_sha256), or the plan refuses and says how to merge. The split files are written by gguf-py's own
GGUFWriter (llama.cpp's Python package: split.no / split.count / split.tensors.count, as tools/gguf-split writes
them); the expected uploads and checksums are those files' bytes and their sha256, computed here with hashlib."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from lab.models import write_llama
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, plan_commands, plan_uploads_raw

HOME_MODELS = "/var/lib/llm/models"


def split_model(tmp_path: Path) -> list[Path]:
    """A tiny llama written as 3 parts of at most 10 tensors (21 tensors in all): the parts, in order."""
    write_llama(tmp_path / "tiny.gguf", split_max_tensors=10)
    parts = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert [p.name for p in parts] == [f"tiny-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return parts


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checked(cmds: list[str], path: str, sha256: str) -> bool:
    """A command on the host compares `path` with `sha256` (roles/ops.py verified, or files.download's check)."""
    return any(path in c and sha256 in c and "sha256sum" in c for c in cmds)


def test_plan_split_gguf_every_part_uploaded_and_checked(tmp_path):
    parts = split_model(tmp_path)
    inst = {"model_source": str(parts[0]), "model_sha256": sha(parts[0]),
            "model_parts_sha256": [sha(p) for p in parts[1:]], "port": 8081}
    cmds, uploads = plan_uploads_raw(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}})
    cmds = [str(c) for c in cmds]
    for part in parts:
        dest = f"{HOME_MODELS}/{part.name}"
        uploaded = [data for remote, data in uploads.items() if remote == dest or remote.endswith(part.name)
                    or data == part.read_bytes()]
        assert part.read_bytes() in uploaded, f"{part.name} not uploaded: {sorted(uploads)}"
        assert checked(cmds, dest, sha(part)), f"{dest} not checked against its sha256"
    # llama-server is given the first part only: it opens the others itself
    env = next(data.decode() for data in uploads.values() if data.startswith(b"LLAMA_SERVER_ARGS"))
    assert f"{HOME_MODELS}/tiny-00001-of-00003.gguf" in env and "00002-of" not in env


def test_plan_split_gguf_second_deploy_places_nothing(tmp_path):
    """Idempotent: a host that has every part with its sha256 gets no upload and no check that could fail."""
    parts = split_model(tmp_path)
    inst = {"model_source": str(parts[0]), "model_sha256": sha(parts[0]),
            "model_parts_sha256": [sha(p) for p in parts[1:]], "port": 8081}
    have = {re.compile(f"sha256sum {HOME_MODELS}/{p.name}"): [f"{sha(p)}  {HOME_MODELS}/{p.name}"] for p in parts}
    have.update({re.compile(f"sha1sum {HOME_MODELS}/{p.name}"):
                 [f"{hashlib.sha1(p.read_bytes()).hexdigest()}  {HOME_MODELS}/{p.name}"] for p in parts})
    have.update({re.compile(f"stat .*{HOME_MODELS}/{p.name}"):
                 [f"user=llm group=llm mode=-rw-r----- atime=0 mtime=0 ctime=0 size={p.stat().st_size} "
                  f"'{HOME_MODELS}/{p.name}'"] for p in parts})
    cmds, uploads = plan_uploads_raw(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}}, responses=have)
    assert not [r for r in uploads if r.endswith(".gguf") or "tiny-0000" in r], sorted(uploads)


def test_plan_split_gguf_without_the_parts_checksums_is_refused_with_the_merge(tmp_path):
    parts = split_model(tmp_path)
    inst = {"model_source": str(parts[0]), "model_sha256": sha(parts[0]), "port": 8081}
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}})
    text = str(e.value)
    assert "llama_cpp_instances.tiny.model_parts_sha256" in text and "first of 3 parts" in text
    assert "tiny-00002-of-00003.gguf .. tiny-00003-of-00003.gguf" in text
    assert "llama-gguf-split --merge" in text


def test_plan_split_gguf_wrong_part_checksum_or_missing_part_refused(tmp_path):
    parts = split_model(tmp_path)
    wrong = {"model_source": str(parts[0]), "model_sha256": sha(parts[0]),
             "model_parts_sha256": [sha(parts[1]), "b" * 64], "port": 8081}
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": wrong}})
    assert "model_parts_sha256[1]" in str(e.value) and sha(parts[2]) in str(e.value)
    good = {**wrong, "model_parts_sha256": [sha(p) for p in parts[1:]]}
    parts[2].unlink()
    with pytest.raises(SettingsError, match="tiny-00003-of-00003.gguf of the split GGUF is missing"):
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": good}})


def test_plan_split_gguf_given_by_a_later_part_refused(tmp_path):
    parts = split_model(tmp_path)
    inst = {"model_source": str(parts[1]), "model_sha256": sha(parts[1]), "port": 8081}
    with pytest.raises(SettingsError, match=r"part 2 of 3 .*give tiny-00001-of-00003.gguf"):
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}})


def test_plan_split_gguf_from_urls_each_part_downloaded_with_its_sha256():
    shas = ["a" * 64, "b" * 64, "c" * 64]
    inst = {"model_source": "https://models.example/q/big-00001-of-00003.gguf?download=true",
            "model_sha256": shas[0], "model_parts_sha256": shas[1:], "port": 8081}
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}})]
    fetches = [c for c in cmds if c.startswith("curl ")]
    for no, want in zip((1, 2, 3), shas):
        name = f"big-0000{no}-of-00003.gguf"
        assert any(f"https://models.example/q/{name}?download=true" in c for c in fetches), (name, fetches)
        assert checked(cmds, f"{HOME_MODELS}/{name}", want), name
    mirror = "http://10.0.0.1:8765/models"
    cmds = [str(c) for c in plan_commands(DEBIAN_13, {"llama_cpp_model_mirror": mirror,
                                                      "llama_cpp_instances": {"tiny": inst}})]
    fetches = [c for c in cmds if c.startswith("curl ")]
    for no, want in zip((1, 2, 3), shas):
        assert any(f"{mirror}/{want}/big-0000{no}-of-00003.gguf" in c for c in fetches), fetches
    assert not [c for c in fetches if "models.example" in c]


def test_plan_split_gguf_on_the_host_needs_every_part_there():
    first = "/srv/models/big-00001-of-00002.gguf"
    inst = {"model_path": first, "port": 8081}
    with pytest.raises(SettingsError, match=r"model_path = '/srv/models/big-00002-of-00002.gguf'.*no such file"):
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}},
                      responses={re.compile(f"stat .*{first}"): [
                          f"user=llm group=llm mode=-rw-r----- atime=0 mtime=0 ctime=0 size=10 '{first}'"]})


def test_model_parts_sha256_on_a_one_file_model_refused():
    inst = {"model_source": "https://models.example/tiny.gguf", "model_sha256": "a" * 64,
            "model_parts_sha256": ["b" * 64], "port": 8081}
    with pytest.raises(SettingsError, match=r"model_parts_sha256.*not a split GGUF.*leave model_parts_sha256 unset"):
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}})


def test_plan_split_gguf_parts_out_of_order_refused_by_their_split_no(tmp_path):
    """Parts renamed out of order: each part's split.no (written by the gguf writer) disagrees with its name, and
    the planner, reading every part, refuses before any command."""
    parts = split_model(tmp_path)
    tmp = parts[1].with_name("swap")
    parts[1].rename(tmp)
    parts[2].rename(parts[1])
    tmp.rename(parts[2])
    inst = {"model_source": str(parts[0]), "model_sha256": sha(parts[0]),
            "model_parts_sha256": [sha(p) for p in parts[1:]], "port": 8081}
    with pytest.raises(SettingsError, match=r"tiny-00002-of-00003.gguf: split.no is 2, not 1"):
        plan_commands(DEBIAN_13, {"llama_cpp_instances": {"tiny": inst}})
