"""The settings model and the version maps (fast: no host)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roles.cuda import decide as cuda
from roles.nvidia_driver import decide as nvidia_driver
from roles.cuda.versions import DISTRO_TOOLKITS, NVIDIA_TOOLKITS
from roles.nvidia_driver.versions import DRIVER_PINS
from roles.platform import SUPPORTED
from roles.settings import Settings, SettingsError, load_settings, settings_table
from roles.volta import LAST_CUDA_MAJOR_FOR_SM70, LAST_VOLTA_DRIVER_BRANCH

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults_validate_and_pyinfra_keys_are_ignored():
    s = load_settings("h", {"ssh_port": 2201, "_sudo": True, "fake_delay": 0})
    assert s == Settings()


def test_typo_is_refused_with_the_closest_key():
    with pytest.raises(SettingsError) as e:
        load_settings("box1", {"tuning_swapiness": 5})
    msg = str(e.value)
    assert "box1" in msg and "tuning_swapiness = 5" in msg and "did you mean 'tuning_swappiness'" in msg


def test_every_problem_is_reported_at_once_with_key_value_and_fix():
    with pytest.raises(SettingsError) as e:
        load_settings("h", {"tuning_swappiness": 500, "tuning_thp_mode": "sometimes", "base_service_user": "Root!"})
    assert len(e.value.problems) == 3
    for p in e.value.problems:
        assert re.match(r"^\w+ = .+: .+\. Fix: .+", p), p
    assert any("tuning_swappiness = 500" in p and "less than or equal to 200" in p for p in e.value.problems)


def test_sysctl_extra_cannot_shadow_its_own_settings():
    with pytest.raises(SettingsError, match="tuning_swappiness"):
        load_settings("h", {"tuning_sysctl_extra": {"vm.swappiness": 1}})


def test_readme_lists_every_setting_with_its_default():
    assert settings_table() in README.read_text(), "README settings table is stale: python -m roles.settings"


def test_no_pinned_driver_drops_volta_or_is_open():
    for (platform, source), pins in DRIVER_PINS.items():
        for pin in pins:
            assert pin.branch <= LAST_VOLTA_DRIVER_BRANCH, (platform, pin.version)
            assert not [n for n in pin.packages if re.search(r"(^|-)open(-|$)", n)], (platform, pin.packages)
            assert all(v.startswith(pin.version) for n, v in pin.packages.items() if "nvidia-kernel-dkms" in n
                       or "dkms" in n)


def test_no_toolkit_in_the_map_is_too_new_for_sm70():
    for tk in list(DISTRO_TOOLKITS.values()) + list(NVIDIA_TOOLKITS.values()):
        assert tk.major <= LAST_CUDA_MAJOR_FOR_SM70


@pytest.mark.parametrize("platform_id", sorted(SUPPORTED))
def test_default_stack_of_every_platform_is_accepted(platform_id):
    """The defaults must never be refused by our own checks (driver new enough for the default toolkit)."""
    platform = SUPPORTED[platform_id]
    settings = Settings()
    driver, problems = nvidia_driver.plan(settings, platform, {"linux-image-amd64": ["1"]})
    assert not problems, problems
    toolkits, problems = cuda.plan(settings, platform, driver.pin)
    assert not problems and toolkits, problems


def test_headers_metapackage_follows_the_kernel_flavour():
    debian, ubuntu = SUPPORTED["debian12"], SUPPORTED["ubuntu2204"]
    assert nvidia_driver.headers_metapackage(debian, {"linux-image-cloud-amd64": [], "linux-image-6.1.0-9-cloud-amd64": []}) \
        == "linux-headers-cloud-amd64"
    assert nvidia_driver.headers_metapackage(ubuntu, {"linux-image-generic-hwe-22.04": []}) \
        == "linux-headers-generic-hwe-22.04"
    assert nvidia_driver.headers_metapackage(ubuntu, {}) == "linux-headers-generic"


def test_write_readme_table_replaces_only_the_marked_table(tmp_path):
    from roles.settings import write_readme_table

    readme = tmp_path / "README.md"
    readme.write_text("# title\n\n<!-- settings:start -->\n| stale |\n<!-- settings:end -->\n\nafter\n")
    write_readme_table(str(readme))
    assert readme.read_text() == ("# title\n\n<!-- settings:start -->\n" + settings_table()
                                  + "\n<!-- settings:end -->\n\nafter\n")


def test_vllm_version_description_names_every_installable_release():
    # a new user picks vllm_version from the README table: every release roles/vllm/versions.py installs (those not
    # refused, with a lock per Python in files/vllm/) must be named there, with its engine
    from roles.vllm.versions import VLLM_RELEASES
    description = Settings.model_fields["vllm_version"].description
    installable = [r for r in VLLM_RELEASES.values() if r.refused is None]
    assert [r.version for r in installable] == ["0.8.5.post1", "0.10.2", "0.19.1"]
    for r in installable:
        assert all(r.lock_file(py).is_file() for py in r.pythons), r.version
        assert re.search(rf"{re.escape(r.version)}: {r.engine}\b", description), (r.version, description)
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `vllm_version` |"))
    assert description in row, "README table: python -m roles.settings --write-readme"


def _float_fields(model) -> list[str]:
    """The fields of a pydantic model whose type takes a float (float, float | None) or a list of floats
    (tensor_split: list[Annotated[float, ...]] | None): the latter are given as [1, value]."""
    import typing

    def takes_float(t) -> bool:
        return t is float or (typing.get_origin(t) is typing.Annotated and typing.get_args(t)[0] is float) or any(
            takes_float(a) for a in typing.get_args(t) if a is not type(None))
    return [n for n, f in model.model_fields.items() if takes_float(f.annotation)]


_INSTANCE_BASE = {"llama_cpp_instances": {"model_source": "/m.gguf", "model_sha256": "a" * 64},
                  "vllm_instances": {"model_source": "org/model"},
                  "lmdeploy_instances": {"model_source": "org/model"}}


def _float_settings() -> list[tuple[str, str | None]]:
    from roles.llama_cpp.settings import LlamaCppInstance
    from roles.lmdeploy.settings import LmdeployInstance
    from roles.vllm.settings import VllmInstance
    out = [(n, None) for n in _float_fields(Settings)]
    for key, model in (("llama_cpp_instances", LlamaCppInstance), ("vllm_instances", VllmInstance),
                       ("lmdeploy_instances", LmdeployInstance)):
        out += [(n, key) for n in _float_fields(model)]
    return out


@pytest.mark.parametrize("spelled", [".nan", ".inf", "-.inf"])
@pytest.mark.parametrize("name,instances", _float_settings())
def test_a_float_setting_that_yaml_reads_as_nan_or_infinity_is_refused_by_name(name, instances, spelled):
    """YAML 1.1 (PyYAML, group_data/*.yml) reads .nan and .inf as floats; a bound like `le=4096` compares False with
    NaN and blamed the bound, and a setting bounded only below (rope_scale: gt=0) took .inf and rendered
    `--rope-scale inf`. Each float setting of the model (read from its fields) is refused as not finite."""
    import yaml
    value = yaml.safe_load(f"v: {spelled}")["v"]
    if name == "tensor_split":
        value = [1, value]
    if instances is None:
        data = {name: value}
        where = name
    else:
        data = {instances: {"m": {**_INSTANCE_BASE[instances], name: value}}}
        where = f"{instances}.m.{name}"
    with pytest.raises(SettingsError) as e:
        load_settings("box", data)
    where += ".1" if isinstance(value, list) else ""  # pydantic names the list item
    said = [line for line in str(e.value).splitlines() if line.strip().startswith(f"- {where} =")]
    assert said and "finite number" in said[0], str(e.value)


def test_the_readme_names_the_characters_extra_args_words_may_hold():
    """The README's charset for extra_args words is what ArgWord (roles/settings_base.py) accepts: each of its
    characters alone is a valid word, and a word with any other (a JSON value, a space, a quote, a shell sign) is
    refused by the settings model."""
    from pydantic import TypeAdapter, ValidationError

    from roles.settings_base import ArgWord

    chars = re.search(r"holds only letters, digits and `([^`]+)`", " ".join(README.read_text().split()))[1]
    adapter = TypeAdapter(ArgWord)
    import string

    for c in string.ascii_letters + string.digits + string.punctuation + " ":
        if c.isalnum() or c in chars:
            assert adapter.validate_python(f"a{c}") == f"a{c}"
        else:
            with pytest.raises(ValidationError, match="String should match pattern"):
                adapter.validate_python(f"a{c}")
