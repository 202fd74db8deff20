"""The one typed settings model: every setting of every role, its default and a one-line explanation.

Settings come from pyinfra host data (inventory, group_data/*.py, --data). They are validated once per host,
before any operation is added, by `load_settings`; a wrong type, an out-of-range value or an unknown key (a
typo) raises `SettingsError`, which stops the whole deploy before the first change to any host. Each setting is
prefixed by the role that reads it. The README's settings table is generated from this module
(`python -m roles.settings --write-readme`) and a test keeps the two in sync.
"""

from __future__ import annotations

import difflib
import importlib
import re
from typing import Annotated, Any, Literal

import ipaddress

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from roles.engine_packages import ENGINE_PACKAGES
# re-exported: every role imports these from here
from roles.settings_base import (ArgWord, CudaVersion, HostPath, InstanceOnGpus, SYSTEM_DIRS, Sha256,  # noqa: F401
                                 SettingsError, once_each, problem)

# Host data keys that belong to pyinfra and its connectors, not to this toolkit.
_PYINFRA_PREFIXES = ("ssh_", "_", "winrm_", "docker_", "dockerssh_", "chroot_", "local_", "terraform_",
                     "vagrant_", "fake_")


class _HostSettings(BaseModel):
    """The settings of the roles every host has (GPU, base, tuning, driver, GPU policy, CUDA); the engines' come
    after them (roles/NAME/settings.py SETTINGS), then Settings' own (Ray, monitoring)."""

    # -- GPU --------------------------------------------------------------------------------------------
    gpu_compute_capability: Annotated[str, BeforeValidator(lambda v: f"{v:.1f}" if isinstance(v, float) else v)] = Field(
        "7.0", pattern=r"^\d+\.\d$",
        description="compute capability of the box's GPUs, used where no driver is loaded yet (V100: 7.0)")

    gpu_memory_mib: int = Field(
        16160, ge=1024, le=1 << 20,
        description="VRAM per GPU in MiB for the planner where nvidia-smi cannot tell yet (before the first driver "
                    "install); 16 GB V100: 16160, 32 GB: 32510")
    gpu_count: int = Field(1, ge=1, le=16, description="GPUs per box for the planner where nvidia-smi cannot tell yet")
    gpu_usable_fraction: float = Field(
        1.0, gt=0, le=1, description="share of VRAM the planner may fill; CUDA context and compute buffers are "
                                     "already counted, so below 1 is extra margin")

    # -- base -------------------------------------------------------------------------------------------
    base_apt_mirror: str | None = Field(
        None, pattern=r"^https?://\S+$", description="distribution mirror URL; None: deb.debian.org / archive.ubuntu.com")
    base_apt_security_mirror: str | None = Field(
        None, pattern=r"^https?://\S+$", description="mirror of the distribution's security archive (CODENAME-security); "
                                                  "None: security.debian.org/debian-security / security.ubuntu.com")
    base_extra_packages: list[str] = Field(
        default_factory=list, description="extra apt packages to install on every host")
    base_service_user: str = Field(
        "llm", pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
        description="unprivileged system user that the inference services run as")
    base_service_home: HostPath = Field(
        "/var/lib/llm", description="home of the service user (models and venvs live here); not under /home or /root")
    base_ca_certificates: list[str] = Field(
        default_factory=list, description="control-machine PEM files the hosts must trust as well (a TLS-inspecting "
                                          "proxy's CA); installed under /usr/local/share/ca-certificates")
    base_apt_lock_timeout_s: int = Field(
        300, ge=0, le=3600, description="how long apt waits for a dpkg lock held by another apt run")

    # -- tuning -----------------------------------------------------------------------------------------
    tuning_swappiness: int = Field(10, ge=0, le=200, description="vm.swappiness")
    tuning_nr_hugepages: int = Field(0, ge=0, le=1_000_000, description="vm.nr_hugepages (2 MiB pages reserved)")
    tuning_sysctl_extra: dict[str, int | str] = Field(
        default_factory=lambda: {"vm.max_map_count": 1048576, "net.core.somaxconn": 4096},
        description="further kernel settings written to the same sysctl.d file")
    tuning_swap_size_gib: float = Field(8, ge=0, le=4096, description="swapfile size in GiB; 0: no swapfile")
    tuning_swap_file: HostPath = Field("/swapfile", description="swapfile path")
    tuning_thp_mode: Literal["always", "madvise", "never"] = Field(
        "madvise", description="transparent hugepage mode, applied at every boot")
    tuning_nofile_limit: int = Field(
        1048576, ge=1024, le=1073741816, description="open-file limit (soft and hard) of the service user")

    # -- nvidia_driver ----------------------------------------------------------------------------------
    nvidia_driver_source: Literal["distro", "nvidia", "runfile"] = Field(
        "distro", description="distro: Debian non-free / Ubuntu restricted (-server); nvidia: NVIDIA's CUDA repo; "
                              "runfile: NVIDIA's .run installer with DKMS (Debian 13: the only R580 there)")
    nvidia_driver_runfile_url: str | None = Field(
        None, pattern=r"^https?://\S+\.run$",
        description="URL of the pinned NVIDIA-Linux-x86_64-<version>.run on a mirror (nvidia_driver_source: runfile); "
                    "None: NVIDIA's download server; its pinned sha256 is checked whatever the source")
    nvidia_driver_allow_untested_kernel: bool = Field(
        False, description="accept a running or installed kernel of a series newer than any the pinned driver "
                           "branch is known to build on (roles/nvidia_driver/versions.py KERNEL_NEWEST_KNOWN); "
                           "refused otherwise")
    nvidia_driver_version: str | None = Field(
        None, pattern=r"^\d{3}\.\d{2,3}(\.\d{2})?$",
        description="exact driver version; None: the pinned default for the OS and source (README table)")
    nvidia_driver_kernel_module: Literal["proprietary", "open"] = Field(
        "proprietary", description="kernel module flavour; open needs compute capability >= 7.5 (refused on V100)")
    nvidia_driver_headers_package: str | None = Field(
        None, pattern=r"^linux-headers-[a-z0-9.+-]+$", description="kernel headers metapackage; None: that of the kernel metapackage the booted kernel belongs to")
    nvidia_driver_secure_boot: Literal["refuse", "enroll"] = Field(
        "refuse", description="with Secure Boot on and no DKMS signing key enrolled: refuse the deploy (naming the "
                              "fixes), or enroll: make the DKMS key and queue it for MokManager at the next boot")
    nvidia_driver_reboot: bool = Field(
        False, description="reboot when the running module must change (else the deploy says a reboot is due)")

    # -- gpu_policy -------------------------------------------------------------------------------------
    gpu_policy_power_limit_w: float | None = Field(
        None, gt=0, le=2000, description="power limit of every GPU in W (nvidia-smi -pl), set at each boot; checked "
                                         "against each card's Min..Max Power Limit (V100 PCIe 100..250, SXM2 "
                                         "150..300); None: leave the card's")
    gpu_policy_application_clocks: str | None = Field(
        None, pattern=r"^\d{2,5},\d{2,5}$", description="application clocks 'MEMORY,GRAPHICS' in MHz (nvidia-smi "
                                                        "-ac), set at each boot; must be a pair nvidia-smi -q -d "
                                                        "SUPPORTED_CLOCKS lists (V100 PCIe: 877,1380 at most); "
                                                        "None: leave the card's")
    gpu_policy_compute_mode: Literal["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"] | None = Field(
        None, description="compute mode (nvidia-smi -c), set at each boot; PROHIBITED refused with an "
                          "instance on the GPU, EXCLUSIVE_PROCESS with two on one GPU; None: leave the card's")
    gpu_policy_ecc: bool | None = Field(
        None, description="ECC on or off (nvidia-smi -e); a change becomes current only at a reboot "
                          "(gpu_policy_reboot); None: leave the card's")
    gpu_policy_reboot: bool = Field(
        False, description="reboot when the ECC mode must change (else the deploy sets it pending and says a reboot "
                           "is due)")

    # -- cuda -------------------------------------------------------------------------------------------
    cuda_source: Literal["distro", "nvidia"] | None = Field(
        None, description="distro: nvidia-cuda-toolkit (Debian); nvidia: NVIDIA's repo; None: distro on Debian, "
                          "nvidia on Ubuntu")
    cuda_versions: list[CudaVersion] | None = Field(
        None, min_length=1, description="toolkits to install side by side; None: the source's default for the OS")
    cuda_default_version: CudaVersion | None = Field(
        None, description="toolkit that /usr/local/cuda and login shells use; None: the first of cuda_versions")
    cuda_nvidia_repo_url: str = Field(
        "https://developer.download.nvidia.com/compute/cuda/repos/", pattern=r"^https?://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~%+:-]+)*/$",
        description="root of NVIDIA's CUDA repository, or of a mirror of it (ends in '/'; the OS directory such as "
                    "ubuntu2204/x86_64/ is appended); the signing key's fingerprint is checked whatever the source")
    cuda_allow_minor_version_compat: bool = Field(
        False, description="allow a toolkit newer than the driver through CUDA minor-version compatibility")

    @field_validator("tuning_sysctl_extra")
    @classmethod
    def _sysctl_keys(cls, v: dict[str, int | str]) -> dict[str, int | str]:
        for key, value in v.items():
            if not re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_-]+)+", key):
                raise ValueError(f"{key!r} is not a sysctl key like 'vm.max_map_count'")
            if key in ("vm.swappiness", "vm.nr_hugepages"):
                raise ValueError(f"{key!r} has its own setting (tuning_{key.split('.')[1]})")
            if "\n" in str(value):
                raise ValueError(f"value of {key!r} contains a newline")
        return v

    @field_validator("base_service_home", "tuning_swap_file")
    @classmethod
    def _not_system_dirs(cls, v: str, info) -> str:
        if v == "/" or v.startswith(("/home/", "/root/")) or v in ("/home", "/root") or \
                any(v == d or v.startswith(d + "/") for d in SYSTEM_DIRS):
            example = "/swapfile" if info.field_name == "tuning_swap_file" else "/var/lib/llm"
            raise ValueError(f"{v!r} is a system or login-home location; use a dedicated path such as {example}")
        return v

    _no_duplicates = field_validator("cuda_versions")(lambda v: once_each(v, "version"))

    @field_validator("base_extra_packages")
    @classmethod
    def _package_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+(=[A-Za-z0-9.+~:-]+)?", name):
                raise ValueError(f"{name!r} is not an apt package name (optionally name=version)")
        return v


def _engine_settings() -> tuple[type[BaseModel], ...]:
    """Each registered engine's settings mixin (roles/NAME/settings.py SETTINGS), in roles/engine_packages.py's
    order. Imported by name: adding an engine is one name in ENGINE_PACKAGES, not an import here."""
    return tuple(importlib.import_module(f"roles.{pkg}.settings").SETTINGS for pkg in ENGINE_PACKAGES)


# The bases in reverse: pydantic orders fields from the last base to the first, so the host roles' settings come
# first, then the engines' in the registry's order, then Ray's and monitoring's below.
class Settings(*reversed(_engine_settings()), _HostSettings):
    """All settings. Units are in the names (_gib = GiB, _s = seconds). None means "chosen per OS" as described."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    # -- ray (vLLM across several boxes) ------------------------------------------------------------------
    ray_cluster: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="inventory group whose hosts form this host's Ray cluster; every vLLM instance of its hosts "
                    "then spans all of them (pipeline parallel across the nodes, tensor parallel inside each); "
                    "None: no cluster")
    ray_head: str | None = Field(
        None, min_length=1, description="inventory name of the cluster's head host (required with ray_cluster)")
    ray_interface: str | None = Field(
        None, pattern=r"^[A-Za-z0-9_.:@-]{1,15}$",
        description="network interface between the nodes (required with ray_cluster): its IPv4 address is the "
                    "node's Ray address; NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME")
    ray_port: int = Field(
        6379, ge=1024, le=65000, description="Ray's GCS port on the head; the node manager, object manager and agents "
                                             "use the next six on every node (README: firewall)")
    ray_min_worker_port: int = Field(10002, ge=1024, le=65535, description="first port of Ray's worker processes")
    ray_max_worker_port: int = Field(10999, ge=1024, le=65535, description="last port of Ray's worker processes")

    # -- monitoring (roles/monitoring: node exporter, GPU exporter and doctor timers, scrape configuration) ------
    monitoring_enabled: bool = Field(
        False, description="install prometheus-node-exporter (the distribution's) with its textfile collector, and "
                           "the timers that write the GPU exporter's and the doctor's metrics there; false: remove "
                           "the timers and the exporter's configuration an earlier deploy set up")
    monitoring_listen_address: str = Field(
        "127.0.0.1", description="address the node exporter listens on (it has no authentication: loopback unless "
                                 "monitoring_scrapers names who may connect)")
    monitoring_node_exporter_port: int = Field(
        9100, ge=1024, le=65535, description="the node exporter's TCP port (9100: Prometheus' registered port)")
    monitoring_scrapers: list[str] = Field(
        default_factory=list, description="IP addresses or networks (CIDR) of the Prometheus servers that may "
                                          "connect to the node exporter (systemd IPAddressAllow, all others "
                                          "denied); required with a listen address other than loopback")
    monitoring_gpu_interval_s: int = Field(
        15, ge=5, le=900, description="seconds between two runs of the GPU exporter (nvidia-smi into the "
                                      "textfile directory); at most 900: V100kitGpuExporterStale fires after 1800 s")
    monitoring_doctor_interval_s: int = Field(
        300, ge=30, le=900, description="seconds between two runs of the doctor's host-local checks on the box "
                                        "(v100kit_check_ok metrics); at most 900: the V100kitDoctorStale alert "
                                        "fires after 1800 s without a run")
    monitoring_textfile_dir: HostPath = Field(
        "/var/lib/prometheus/node-exporter", description="the node exporter's textfile collector directory, passed "
                                                         "to it explicitly (the default of Debian's package, which "
                                                         "ships the directory)")
    monitoring_credentials_dir: str = Field(
        "/etc/prometheus/v100kit", pattern=r"^/[A-Za-z0-9._+@:,=/-]*$",
        description="directory on the Prometheus server holding each keyed engine instance's API key "
                    "(HOST_UNIT.key, 0600): the generated scrape configuration's credentials_file; "
                    "`v100kit monitoring scrape-config --write-credentials` fills it")

    @field_validator("monitoring_listen_address")
    @classmethod
    def _monitoring_address(cls, v: str) -> str:
        ipaddress.ip_address(v)  # ValueError names the value: an IP address, no port, no host name
        return v

    @field_validator("monitoring_scrapers")
    @classmethod
    def _scraper_networks(cls, v: list[str]) -> list[str]:
        for item in v:
            ipaddress.ip_network(item, strict=False)  # ValueError names the value
        return once_each(v, "scraper")


def load_settings(host_name: str, data: dict[str, Any]) -> Settings:
    """Validate a host's data into Settings.

    `data` is the host's pyinfra data as a dict (all groups merged). Keys owned by pyinfra (ssh_*, _*, ...) are
    ignored. Raises SettingsError listing every problem at once.
    """
    ours = {k: v for k, v in data.items() if not k.startswith(_PYINFRA_PREFIXES)}
    problems = pyinfra_key_problems(data)
    try:
        settings = Settings(**ours)
    except ValidationError as e:
        raise SettingsError(host_name, problems + [_explain(err) for err in e.errors()]) from None
    if problems:
        raise SettingsError(host_name, problems)
    return settings


def pyinfra_key_problems(data: dict[str, Any]) -> list[str]:
    """The `ssh_*` and `_*` keys of `data` that neither pyinfra's SSH connector (SSHConnector.data_meta) nor its
    global arguments (all_global_arguments) know: a typo there (`ssh_usr`, `_sudoo`) would otherwise be ignored by
    pyinfra and by the toolkit alike. One problem per key, with the closest known key."""
    from pyinfra.api.arguments import all_global_arguments
    from pyinfra.connectors.ssh import SSHConnector

    known = {"ssh_": set(SSHConnector.data_meta), "_": {name for name, _ in all_global_arguments()}}
    problems = []
    for key in sorted(data):
        prefix = "ssh_" if key.startswith("ssh_") else "_" if key.startswith("_") else None
        if prefix is None or key in known[prefix]:
            continue
        close = difflib.get_close_matches(key, known[prefix], n=1)
        fix = f"did you mean {close[0]!r}? Rename it" if close else "remove it"
        problems.append(problem(key, data[key], "not a key pyinfra knows either (its SSH connector's data or its "
                                "global arguments)", fix))
    return problems


#: Common spellings of pyinfra's own host data keys.
PYINFRA_HINTS = {"sudo": "_sudo", "sudo_user": "_sudo_user", "user": "ssh_user", "port": "ssh_port",
                 "hostname": "ssh_hostname", "key": "ssh_key", "su_user": "_su_user"}


def _explain(err: dict) -> str:
    """One SettingsError line for one pydantic error: the dotted key, the value, why, and the fix."""
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    model: type[BaseModel] = Settings
    field_name = loc[0]
    for part in loc[:-1]:  # walk into nested models (llama_cpp_instances.NAME.port)
        ann = model.model_fields[part].annotation if part in model.model_fields else None
        nested = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        if nested:
            model = nested[0]
        if part in model.model_fields:
            field_name = part
    if loc[-1] in model.model_fields:
        field_name = loc[-1]
    if err["type"] == "extra_forbidden":
        if loc[-1] in PYINFRA_HINTS:
            return problem(key, err.get("input"), "not a toolkit setting",
                           f"did you mean pyinfra's {PYINFRA_HINTS[loc[-1]]!r}? Rename it")
        close = difflib.get_close_matches(loc[-1], model.model_fields, n=1)
        fix = f"did you mean {close[0]!r}? Rename it" if close else "remove it"
        return problem(key, err.get("input"), "unknown setting", fix + " (settings are listed in README.md)")
    if "[key]" in loc:  # a dict key (an instance name) failed its pattern
        return problem(key.replace(".[key]", ""), err.get("input"), "instance names are lower-case letters, digits, "
                       "'-' and '_' (they become systemd unit names)", "rename the instance, e.g. 'gemma27b'")
    f = model.model_fields.get(field_name) or Settings.model_fields[loc[0]]
    default = f.get_default(call_default_factory=True)
    value, why = err.get("input"), err["msg"]
    pattern = (err.get("ctx") or {}).get("pattern", "")
    if err["type"] == "string_pattern_mismatch" and pattern.startswith("^https?://"):  # a URL setting
        if not re.match(r"https?://", str(value)):
            why = "not an http:// or https:// URL (those are the only ones the hosts fetch)"
        elif re.match(pattern, f"{value}/"):
            why = "the URL must end in '/'"
    return problem(key, value, why, f"set {key} to a valid value ({f.description}; default {default!r})")


def instance_models() -> dict[str, type[BaseModel]]:
    """{settings key: instance model} of each setting that maps instance names to a model (`llama_cpp_instances`:
    LlamaCppInstance, ...), in Settings' field order: the engines' instance settings."""
    models = {}
    for key, f in Settings.model_fields.items():
        args = getattr(f.annotation, "__args__", ())
        if len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
            models[key] = args[1]
    return models


def settings_table() -> str:
    """The README's settings table (markdown): setting, default, meaning."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    fields = [(n, f) for n, f in Settings.model_fields.items()]
    fields += [(f"{key}.NAME.{n}", f) for key, model in instance_models().items() for n, f in model.model_fields.items()]
    for name, f in fields:
        default = f.get_default(call_default_factory=True)
        rows.append(f"| `{name}` | `{default!r}` | {f.description.replace('|', '&#124;')} |")
    return "\n".join(rows)


def write_readme_table(readme: str = "README.md") -> None:
    """Replace the table between the settings markers in the README."""
    text = open(readme).read()
    start, end = "<!-- settings:start -->\n", "<!-- settings:end -->"
    head, rest = text.split(start, 1)
    open(readme, "w").write(head + start + settings_table() + "\n" + end + rest.split(end, 1)[1])


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write-readme"]:
        write_readme_table()
    else:
        print(settings_table())
