"""What the monitoring role does on one host, decided from settings and the host's plan before any change, and the
Prometheus scrape configuration for an inventory. Pure: no pyinfra operation is imported here.

On the host (monitoring_enabled):
- `prometheus-node-exporter` from the distribution's archive, started through a systemd drop-in with
  `--web.listen-address=monitoring_listen_address:monitoring_node_exporter_port` and the textfile collector on
  monitoring_textfile_dir. Debian's package starts it with `$ARGS` from /etc/default/prometheus-node-exporter
  (`ARGS=""` as shipped: bookworm 1.5.0-1+b6) and listens on `:9100`, every address, by default (`--help`:
  `--web.listen-address=:9100`); its textfile directory defaults to /var/lib/prometheus/node-exporter (`--help`:
  `--collector.textfile.directory="/var/lib/prometheus/node-exporter"`, a Debian default compiled in; the package
  ships the directory). The node exporter has no authentication, so the default listen address is the loopback:
  a Prometheus on another machine is let in by setting a routable address and naming it in monitoring_scrapers,
  which become systemd's IPAddressAllow= (everything else IPAddressDeny=any; enforced where systemd has cgroup v2
  with BPF, as Debian 11+ and Ubuntu 21.10+ boot by default). The drop-in is written before the package is
  installed, so its first start already listens where the settings say.
- v100kit-gpu-exporter.timer: roles/monitoring/gpu_exporter.py (nvidia-smi, `--output` a .prom file) every
  monitoring_gpu_interval_s.
- v100kit-doctor.timer: roles/monitoring/doctor_local.py (the doctor's host-local checks: why a script of its own
  is in its docstring) every monitoring_doctor_interval_s, with the expectations this module writes.

Each engine instance's /metrics is on its own API port: reachable where its `listen` is. llama-server (with
`metrics`, on by default) answers /metrics only with the API key once api_key_file is set (the 0.3.36 tree's
tools/server/server-http.cpp: only /health and /v1/health are public; the key is read from `Authorization: Bearer`
or `X-Api-Key`), so the generated scrape job reads it from a credentials_file on the Prometheus server
(`authorization: {credentials_file: ...}`: never in a URL or an argument). vLLM checks its key on /v1 only: its
/metrics answers without one (the README's vLLM section); a keyed vLLM instance's job gets the credentials file all
the same, harmless there. LMDeploy's api_server mounts /metrics unless --disable-metrics (0.15.0:
cli/serve.py enable_metrics=not args.disable_metrics) and, with --api-keys, asks the key there as on /v1
(serve/utils/server_utils.py AuthenticationMiddleware skips only /health, /docs, /redoc, /nodes), as llama-server does. Which instances are
scraped is each registered engine's Engine.scrape; what the box's doctor expects of an engine, its Engine.watch.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from roles.settings import Settings, problem

PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
DROPIN_DIR = "/etc/systemd/system/prometheus-node-exporter.service.d"
DROPIN = f"{DROPIN_DIR}/v100kit.conf"
LIB_DIR = "/usr/local/lib/v100kit"  # the scripts the timers run (root-owned, 0644)
EXPECT_FILE = "/etc/v100kit/doctor-local.json"
GPU_UNIT, DOCTOR_UNIT = "v100kit-gpu-exporter", "v100kit-doctor"
GPU_PROM, DOCTOR_PROM = "v100kit_gpu.prom", "v100kit_doctor.prom"
#: the systemd units this role writes (name -> template), removed again when monitoring is turned off
UNITS = {f"{GPU_UNIT}.service": "v100kit-gpu-exporter.service.j2", f"{GPU_UNIT}.timer": "v100kit-timer.j2",
         f"{DOCTOR_UNIT}.service": "v100kit-doctor.service.j2", f"{DOCTOR_UNIT}.timer": "v100kit-timer.j2"}

#: Every metric the toolkit writes or its alerts read, in one place (roles/monitoring/METRICS.md explains them):
#: name -> (type, labels, writer). The GPU exporter's names are the ones it wrote on a real NVIDIA H200
#: (tests/data/gpu_exporter_h200.prom); tests/unit/test_metric_names.py keeps this list and roles/monitoring/
#: gpu_exporter.py equal both ways (every name and label set it writes for recorded nvidia-smi output is here, and
#: every v100kit_gpu_* name here is written for some recorded input), and files/monitoring/alerts.yml and the
#: dashboard may use only these (tests/unit/test_monitoring_decide.py).
GPU_LABELS = ("index", "uuid", "name")  # per-GPU labels: nvidia-smi's index (PCI bus order), uuid, name
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    # GPU exporter (roles/monitoring/gpu_exporter.py; its nvidia-smi --query-gpu field after the colon)
    "v100kit_gpu_exporter_up": ("gauge", ("reason",), "gpu_exporter.py: 1 when nvidia-smi listed the GPUs (reason "
                                                      "\"\"), 0 when it could not: no nvidia-smi, no GPU, nvidia-smi "
                                                      "failed (the reason says which)"),
    "v100kit_gpu_count": ("gauge", (), "gpu_exporter.py: GPUs nvidia-smi lists"),
    "v100kit_gpu_utilization_percent": ("gauge", GPU_LABELS, "gpu_exporter.py: utilization.gpu (%)"),
    "v100kit_gpu_memory_utilization_percent": ("gauge", GPU_LABELS, "gpu_exporter.py: utilization.memory (%)"),
    "v100kit_gpu_memory_used_bytes": ("gauge", GPU_LABELS, "gpu_exporter.py: memory.used"),
    "v100kit_gpu_memory_total_bytes": ("gauge", GPU_LABELS, "gpu_exporter.py: memory.total"),
    "v100kit_gpu_temperature_celsius": ("gauge", GPU_LABELS, "gpu_exporter.py: temperature.gpu"),
    "v100kit_gpu_power_draw_watts": ("gauge", GPU_LABELS, "gpu_exporter.py: power.draw"),
    "v100kit_gpu_power_limit_watts": ("gauge", GPU_LABELS, "gpu_exporter.py: power.limit"),
    "v100kit_gpu_sm_clock_hertz": ("gauge", GPU_LABELS, "gpu_exporter.py: clocks.current.sm"),
    "v100kit_gpu_memory_clock_hertz": ("gauge", GPU_LABELS, "gpu_exporter.py: clocks.current.memory"),
    "v100kit_gpu_clock_event_reasons": ("gauge", GPU_LABELS, "gpu_exporter.py: clocks_event_reasons.active (older drivers: "
                                                      "clocks_throttle_reasons.active), NVML's bitmask"),
    "v100kit_gpu_clock_event_reason_active": ("gauge", GPU_LABELS + ("reason",),
                                              "gpu_exporter.py: 1 while the bitmask's reason is active (gpu_idle, "
                                              "sw_power_cap, hw_slowdown, hw_thermal_slowdown, "
                                              "hw_power_brake_slowdown, sw_thermal_slowdown, ...)"),
    "v100kit_gpu_ecc_mode_enabled": ("gauge", GPU_LABELS, "gpu_exporter.py: ecc.mode.current (Enabled 1, Disabled 0)"),
    "v100kit_gpu_ecc_uncorrected_volatile_errors": ("gauge", GPU_LABELS,
                                                    "gpu_exporter.py: ecc.errors.uncorrected.volatile.total"),
    "v100kit_gpu_ecc_corrected_volatile_errors": ("gauge", GPU_LABELS,
                                                  "gpu_exporter.py: ecc.errors.corrected.volatile.total"),
    "v100kit_gpu_retired_pages_pending": ("gauge", GPU_LABELS, "gpu_exporter.py: retired_pages.pending (Yes 1: retired "
                                                        "pages wait for a reboot)"),
    "v100kit_gpu_pcie_link_gen_current": ("gauge", GPU_LABELS, "gpu_exporter.py: pcie.link.gen.current"),
    "v100kit_gpu_pcie_link_gen_max": ("gauge", GPU_LABELS, "gpu_exporter.py: pcie.link.gen.max"),
    "v100kit_gpu_pcie_link_width_current": ("gauge", GPU_LABELS, "gpu_exporter.py: pcie.link.width.current"),
    "v100kit_gpu_pcie_link_width_max": ("gauge", GPU_LABELS, "gpu_exporter.py: pcie.link.width.max"),
    "v100kit_gpu_xid_log_readable": ("gauge", ("reason",), "gpu_exporter.py: 1 when this boot's kernel log was read "
                                                           "for Xid lines, 0 when not (the reason says why)"),
    "v100kit_gpu_xid_errors": ("gauge", GPU_LABELS + ("pci", "xid"),
                               "gpu_exporter.py: Xid events in this boot's kernel log per GPU (PCI address) and Xid "
                               "code; index/uuid/name empty for a GPU nvidia-smi no longer lists (Xid 79)"),
    "v100kit_gpu_exporter_last_run_timestamp_seconds": ("gauge", (), "gpu_exporter.py: when it wrote its file"),
    # doctor_local.py
    "v100kit_check_ok": ("gauge", ("check",), "doctor_local.py: 1 ok, 0 broken"),
    "v100kit_check_skipped": ("gauge", ("check",), "doctor_local.py: 1 where the check cannot run here"),
    "v100kit_doctor_checks": ("gauge", ("state",), "doctor_local.py"),
    "v100kit_doctor_last_run_timestamp_seconds": ("gauge", (), "doctor_local.py"),
}

#: Xid codes the doctor treats as the GPU or its link failing (roles/doctor/checks.py SERIOUS_XIDS, NVIDIA's Xid
#: catalog); repeated here so that this module stays free of the doctor's imports (a test keeps them equal)
SERIOUS_XIDS = (48, 62, 64, 74, 79, 92, 94, 95)


@dataclass(frozen=True)
class MonitoringPlan:
    """What the role does on one host (monitoring_enabled): the node exporter's arguments and who may connect, the
    timers' intervals, and the doctor's expectations (expectations())."""

    listen: str
    port: int
    scrapers: tuple[str, ...]
    textfile_dir: str
    gpu_interval_s: int
    doctor_interval_s: int
    expect: dict = field(default_factory=dict)

    @property
    def node_exporter_args(self) -> tuple[str, ...]:
        """The node exporter's command-line arguments (the drop-in's ExecStart)."""
        host = f"[{self.listen}]" if ":" in self.listen else self.listen
        return (f"--web.listen-address={host}:{self.port}", f"--collector.textfile.directory={self.textfile_dir}")

    @property
    def ip_address_allow(self) -> tuple[str, ...]:
        """systemd IPAddressAllow= of the node exporter: the loopback and monitoring_scrapers."""
        return ("localhost", *self.scrapers)


def is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def problems(settings: Settings, taken_ports: dict[int, str]) -> list[str]:
    """Refusals before any change: a listen address other than the loopback without monitoring_scrapers (the node
    exporter has no authentication: anyone who reaches the address reads the host's metrics), a scraper network of
    every address (prefix length 0: the same, through IPAddressAllow), and a node exporter
    port an engine instance or Ray uses on this host (`taken_ports`: port -> user)."""
    out = []
    s = settings
    if not s.monitoring_enabled:
        return out
    if not is_loopback(s.monitoring_listen_address) and not s.monitoring_scrapers:
        out.append(problem("monitoring_listen_address", s.monitoring_listen_address,
                           "the node exporter has no authentication, and no monitoring_scrapers limit who may connect",
                           "name your Prometheus servers' addresses in monitoring_scrapers (e.g. ['10.0.0.5']), "
                           "or keep the default 127.0.0.1"))
    networks = [ipaddress.ip_network(item, strict=False) for item in s.monitoring_scrapers]
    for version in (4, 6):  # 0.0.0.0/0, or 0.0.0.0/1 with 128.0.0.0/1: IPAddressAllow lets everyone in
        together = list(ipaddress.collapse_addresses(n for n in networks if n.version == version))
        if any(n.prefixlen == 0 for n in together):
            out.append(problem("monitoring_scrapers", [str(n) for n in networks if n.version == version],
                               f"together they let every IPv{version} address in, and the node exporter has no "
                               "authentication", "name your Prometheus servers' addresses or their network "
                               "(e.g. '10.0.0.5' or '10.0.0.0/24')"))
    if s.monitoring_node_exporter_port in taken_ports:
        out.append(problem("monitoring_node_exporter_port", s.monitoring_node_exporter_port,
                           f"{taken_ports[s.monitoring_node_exporter_port]} uses that port on this host",
                           "choose another port"))
    return out


def taken_ports(settings: Settings) -> dict[int, str]:
    """port -> unit of every engine instance on the host (each registered engine's `ports`), and Ray's ports when
    the host is a cluster node."""
    from roles.engines import registered  # the registry imports the engines, which import the settings

    ports = {}
    for engine in registered():
        ports.update(engine.ports(settings))
    if settings.ray_cluster:
        ports.update({p: "Ray" for p in range(settings.ray_port, settings.ray_port + 7)})
    return ports


def expectations(settings: Settings, driver_pin, plans: dict) -> dict:
    """The doctor's host-local checks' expectations (doctor_local.py --expect): what the control machine decided
    for this host. `driver_pin`: the DriverPin; `plans`: {engine role: its plan or None} (HostPlan.engines). No
    secret: the file is 0644.

    {"driver_version": '580.95.05', "driver_packages": [apt names], "serious_xids": [Xid codes],
     "links": [{"check": row name, "link": path of a current link, "target": the path it must point at,
                "stamp": a file that must exist (installed and checked) or None}],
     "units": [{"unit": 'llama-server@NAME', "needs_gpu": whether it waits for a GPU (skipped without one),
                "n_gpu_layers": -ngl, only where the residency on the GPU is judged}]}
    Links and units come from each registered engine's Engine.watch, in the registry's order."""
    from roles.engines import registered

    watched = [e.watch(plans[e.role]) for e in registered() if plans.get(e.role) is not None]
    return {
        "driver_version": driver_pin.version,
        "driver_packages": sorted(driver_pin.packages),
        "links": [link for w in watched for link in w["links"]],
        "units": [unit for w in watched for unit in w["units"]],
        "serious_xids": list(SERIOUS_XIDS),
    }


def plan(settings: Settings, driver_pin, plans: dict) -> tuple[MonitoringPlan | None, list[str]]:
    """(plan, problems); the plan None with monitoring off (the role then removes what an earlier deploy set up)
    or with problems. `plans`: {engine role: its plan or None}."""
    found = problems(settings, taken_ports(settings))
    if found or not settings.monitoring_enabled:
        return None, found
    s = settings
    return MonitoringPlan(s.monitoring_listen_address, s.monitoring_node_exporter_port, tuple(s.monitoring_scrapers),
                          s.monitoring_textfile_dir, s.monitoring_gpu_interval_s, s.monitoring_doctor_interval_s,
                          expectations(s, driver_pin, plans)), []


# -- the scrape configuration -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """One scrape target of one host: its job, address:port, labels, and the credentials file a keyed engine
    instance's job reads its API key from (None: no key). `note`: a caveat to print (a loopback target)."""

    job: str
    address: str
    labels: dict
    credentials_file: str | None = None
    note: str = ""


def _reach(listen: str, host_address: str) -> str:
    """The address a scraper uses for a service listening on `listen`: the host's own address for a wildcard."""
    address = host_address if listen in ("0.0.0.0", "::") else listen
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def credentials_name(host: str, unit: str) -> str:
    """The file name of an instance's key in monitoring_credentials_dir: HOST_UNIT.key (unit llama-server@NAME)."""
    return f"{host}_{unit}.key"


def targets(host: str, host_address: str, settings: Settings, credentials_dir: str | None = None) -> list[Target]:
    """Every scrape target of one host: its node exporter (monitoring_enabled; the GPU exporter's and the doctor's
    metrics come with it, from the textfile collector) and each engine instance's /metrics. `host_address`: how the
    Prometheus server reaches the host (the inventory's ssh_hostname, else its name). `credentials_dir`: overrides
    monitoring_credentials_dir."""
    from roles.engines import registered

    creds = credentials_dir or settings.monitoring_credentials_dir
    out = []
    loopback = "listens on the loopback: only a Prometheus on the host itself (or sharing its network) reaches it"
    if settings.monitoring_enabled:
        listen = settings.monitoring_listen_address
        out.append(Target("v100kit-node", f"{_reach(listen, host_address)}:{settings.monitoring_node_exporter_port}",
                          {"host": host}, note=f"{host} node exporter {loopback}" if is_loopback(listen) else ""))
    engines = [(e.unit, n, i) for e in registered() for n, i in e.scraped(settings, host)]
    for engine, name, inst in engines:
        unit = f"{engine}@{name}"
        out.append(Target(f"v100kit-{engine}", f"{_reach(inst.listen, host_address)}:{inst.port}",
                          {"host": host, "engine": engine, "instance_name": name},
                          f"{creds}/{credentials_name(host, unit)}" if inst.api_key_file else None,
                          f"{host} {unit} {loopback}" if is_loopback(inst.listen) else ""))
    return out


def scrape_config(hosts: dict[str, list[Target]], scrape_interval_s: int = 30,
                  rule_files: tuple[str, ...] = ()) -> dict:
    """A Prometheus configuration (as a dict; YAML or JSON both load) for `hosts` ({host: targets()}): one job for
    every node exporter, one per engine without a key, and one job per keyed instance (Prometheus sets
    authorization per job), each with `authorization: {type: Bearer, credentials_file: ...}`. Labels: host, engine,
    instance_name. No secret: the credentials files hold the keys."""
    jobs: dict[str, dict] = {}
    for host in hosts:
        for t in hosts[host]:
            name = t.job if t.credentials_file is None else f"{t.job}-{t.labels['host']}-{t.labels['instance_name']}"
            job = jobs.setdefault(name, {"job_name": name, "metrics_path": "/metrics", "static_configs": []})
            if t.credentials_file:
                job["authorization"] = {"type": "Bearer", "credentials_file": t.credentials_file}
            job["static_configs"].append({"targets": [t.address], "labels": dict(t.labels)})
    config: dict = {"global": {"scrape_interval": f"{scrape_interval_s}s", "evaluation_interval": f"{scrape_interval_s}s"}}
    if rule_files:
        config["rule_files"] = list(rule_files)
    config["scrape_configs"] = list(jobs.values())
    return config
