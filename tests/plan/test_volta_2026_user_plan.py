"""Plan-level tests (facts in, commands out, nothing executed) of inputs a new V100 owner of late 2026 writes for the
Volta stack of issue 28, each one a case where the toolkit answered wrongly or unhelpfully before: a refusal whose
fix names a value the settings reject, a toolkit-set Volta flag that extra_args could override, and the like.

Expected values come from the releases' own code as recorded in files/vllm/<version>.json (tools/vllm_pin.py) and
the cited public records, not from roles/vllm/decide.py."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import tempfile
from pathlib import Path

import pytest

from lab.data import tiny_hf_model
from roles.settings import SettingsError
from tests.plan.harness import UBUNTU_2404, plan_commands, plan_uploads

ROOT = Path(__file__).resolve().parents[2]
V100 = {"nvidia-smi --query-gpu": ["0, GPU-00000000-0000-0000-0000-000000000000, Tesla V100-SXM2-32GB, 7.0, 32510, 0, "
                                   "32510, Enabled, 580.95.05"],
        "sys.version_info": ["3.12"]}


@contextlib.contextmanager
def tempfile_model():
    """The lab's tiny safetensors model, written under a temporary directory (never into the lab cache)."""
    with tempfile.TemporaryDirectory() as d:
        yield str(tiny_hf_model(Path(d) / "cache"))


def vllm(model: str, version: str, **inst) -> dict:
    return {"vllm_version": version, "vllm_instances": {"t": {"model_source": model, **inst}}}


def fix_of(error: SettingsError) -> str:
    return str(error).split("Fix: ", 1)[1]


# -- kv_cache_dtype: the fix names values the setting takes --------------------------------------------------------

def test_plan_level_kv_cache_dtype_float16_on_0_19_1_plans_as_its_refusals_say():
    """vLLM 0.19.1's CacheDType (vllm/config/cache.py, recorded in files/vllm/0.19.1.json) has "float16", and its
    TRITON_ATTN backend stores it on 7.0; the refusal of fp8_e4m3 on 0.19.1 names it as a fix. The setting must take
    it, and the service must get `--kv-cache-dtype float16`."""
    facts = json.loads((ROOT / "files/vllm/0.19.1.json").read_text())["facts"]
    assert "float16" in facts["kv_cache_dtypes"] and "float16" in facts["volta_kv_cache_dtypes"]["TRITON_ATTN"]
    with tempfile_model() as m:
        with pytest.raises(SettingsError) as e:
            plan_commands(UBUNTU_2404, vllm(m, "0.19.1", kv_cache_dtype="fp8_e4m3"), responses=V100)
        assert "float16" in fix_of(e.value)
        _, uploads = plan_uploads(UBUNTU_2404, vllm(m, "0.19.1", kv_cache_dtype="float16"), responses=V100)
        args = shlex.split(dict(line.split("=", 1) for line in uploads["/etc/vllm/t.env"].splitlines())["VLLM_ARGS"])
        assert args[args.index("--kv-cache-dtype") + 1] == "float16"


@pytest.mark.parametrize("version", ["0.8.5.post1", "0.10.2"])
def test_plan_level_kv_cache_dtype_float16_refused_where_the_release_has_no_such_value(version):
    """0.8.5.post1 and 0.10.2 have no "float16" CacheDType (their vllm/config.py: auto, fp8, fp8_e4m3, fp8_e5m2[,
    fp8_inc]; files/vllm/<version>.json): refused with the release's own values, naming the setting."""
    facts = json.loads((ROOT / f"files/vllm/{version}.json").read_text())["facts"]
    assert "float16" not in facts["kv_cache_dtypes"]
    with tempfile_model() as m:
        with pytest.raises(SettingsError) as e:
            plan_commands(UBUNTU_2404, vllm(m, version, kv_cache_dtype="float16"), responses=V100)
    assert "vllm_instances.t.kv_cache_dtype = 'float16'" in str(e.value)


def test_plan_level_fp8_e5m2_refusal_on_v1_says_why_for_e5m2():
    """fp8_e5m2 on 0.19.1: refused because its Triton attention reads every fp8 cache as e4m3 (`.view(self.fp8_dtype)`,
    files/vllm/0.19.1.json volta_kv_cache_dtypes_source), and Triton's e4m3 (fp8e4nv) needs sm_89 ("type fp8e4nv not
    supported", issue 28). The reason must say that, not only that e4m3 needs sm_89 (the user asked for e5m2)."""
    with tempfile_model() as m:
        with pytest.raises(SettingsError) as e:
            plan_commands(UBUNTU_2404, vllm(m, "0.19.1", kv_cache_dtype="fp8_e5m2"), responses=V100)
    assert re.search(r"reads every fp8 cache as e4m3", str(e.value)), str(e.value)


# -- extra_args cannot override the Volta flags the toolkit sets ---------------------------------------------------

@pytest.mark.parametrize("extra, flag", [
    (["--attention-backend", "FLEX_ATTENTION"], "--attention-backend"),
    (["--attention-backend=FLASH_ATTN"], "--attention-backend=FLASH_ATTN"),
    (["--compilation-config", "3"], "--compilation-config"),
    (["-cc.cudagraph_mode=FULL"], "-cc.cudagraph_mode=FULL"),
    (["--attention-config.backend=FLEX_ATTENTION"], "--attention-config.backend=FLEX_ATTENTION"),
    (["--compilation-config.cudagraph_mode=FULL"], "--compilation-config.cudagraph_mode=FULL"),
])
def test_plan_level_extra_args_cannot_replace_the_volta_flags_of_0_19_1(extra, flag):
    """0.19.1 runs on Volta with `--attention-backend TRITON_ATTN` (the backend whose head sizes the plan checks,
    vllm/v1/attention/backends/triton_attn.py) and CUDA graphs FULL_DECODE_ONLY (KumphanartDansiri/v100-vllm-2026).
    argparse keeps the last of a repeated option, so an extra `--attention-backend` after them would replace the
    pinned backend (FLASH_ATTN needs 8.0). Refused before any command, naming the word as set by the toolkit.
    The dotted form is one vLLM's own parser takes (FlexibleArgumentParser; the toolkit renders it itself), so it is
    not "not a flag"; nor are the short and config spellings of the same settings (vllm/engine/arg_utils.py:
    `"--compilation-config", "-cc"`, `"--attention-config", "-ac"`)."""
    with tempfile_model() as m:
        with pytest.raises(SettingsError) as e:
            plan_commands(UBUNTU_2404, vllm(m, "0.19.1", extra_args=extra), responses=V100)
    text = str(e.value)
    assert f"vllm_instances.t.extra_args = '{flag}': set by the toolkit" in text, text
    assert "not a flag" not in text


def test_plan_level_dotted_config_flag_of_the_release_passes_the_flag_check():
    """A dotted JSON-config flag the toolkit does not set (--speculative-config.method=ngram) is a flag of 0.19.1's
    parser (--speculative-config in files/vllm/0.19.1.flags.json): not refused as unknown."""
    flags = set(json.loads((ROOT / "files/vllm/0.19.1.flags.json").read_text())["flags"])
    assert "--speculative-config" in flags
    with tempfile_model() as m:
        cmds = plan_commands(UBUNTU_2404, vllm(m, "0.19.1", extra_args=["--speculative-config.method=ngram"]),
                             responses=V100)
    assert any("systemctl start vllm@t" in str(c) for c in cmds)


# -- a release after 0.19: refused with the machine-code evidence ---------------------------------------------------

@pytest.mark.parametrize("version", ["0.21.0", "0.20.0", "0.33.0"])
def test_plan_level_vllm_from_0_20_refused_with_the_sm70_evidence(version):
    """The committed cuobjdump evidence of vLLM 0.21.0's lock (tests/data/sm70/vllm-0.21.0-py3.12.sm70.json) shows
    its own vllm/_C.abi3.so and torch 2.11.0's libtorch_cuda.so without code for 7.0; docs/vllm-releases.md (the
    survey of PyPI) finds the same torch and _C from 0.20.0 to 0.33.0. A user asking for such a release must be told
    that, with the evidence and the newest release that has sm_70 wheels, not only "not verified"."""
    evidence = json.loads((ROOT / "tests/data/sm70/vllm-0.21.0-py3.12.sm70.json").read_text())
    failing = " ".join(evidence["failing"])
    assert "vllm/_C.abi3.so" in failing and "torch/lib/libtorch_cuda.so" in failing and not evidence["ok"]
    with tempfile_model() as m:
        with pytest.raises(SettingsError) as e:
            plan_commands(UBUNTU_2404, vllm(m, version), responses=V100)
    text = str(e.value)
    assert f"vllm_version = '{version}'" in text
    assert "sm_70" in text and "vllm/_C.abi3.so" in text and "libtorch_cuda.so" in text and "docs/vllm-sm70.md" in text
    assert "vllm_version: 0.19.1" in fix_of(e.value)


def test_plan_level_an_unknown_release_before_0_20_is_still_only_unverified():
    """0.15.0 (Feb 2026, torch 2.9.1: a candidate never checked, docs/vllm-releases.md) is refused as unverified,
    without the sm_70 claim."""
    with tempfile_model() as m:
        with pytest.raises(SettingsError) as e:
            plan_commands(UBUNTU_2404, vllm(m, "0.15.0"), responses=V100)
    assert "not a release the toolkit has verified" in str(e.value) and "libtorch_cuda" not in str(e.value)
