"""roles/monitoring/decide.py (targets, the scrape configuration), the shipped alert rules and dashboard, and
`v100kit monitoring scrape-config` (exit status, --json, no secret in its output, the credentials files).

Checked by real tools where one exists: `promtool check rules` on files/monitoring/alerts.yml and `promtool check
config` on a generated configuration (Debian's `prometheus` package; tools/setup.sh --lab installs it)."""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from roles.doctor.checks import SERIOUS_XIDS
from roles.monitoring import decide
from roles.settings import Settings
from v100kit.cli import main

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "files/monitoring/alerts.yml"
DASHBOARD = ROOT / "files/monitoring/grafana-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian's prometheus package: "
                                                             "tools/setup.sh --lab installs it)")
SECRET = "sk-monitoring-test-0123456789abcdef"


def settings(**kw) -> Settings:
    return Settings(**kw)


def test_node_exporter_target_on_the_loopback_says_who_reaches_it():
    (t,) = decide.targets("box1", "gpu-01.example", settings(monitoring_enabled=True))
    assert (t.job, t.address, t.labels, t.credentials_file) == ("v100kit-node", "127.0.0.1:9100", {"host": "box1"},
                                                                None)
    assert "loopback" in t.note


def test_a_wildcard_listen_address_is_reached_at_the_hosts_own_address():
    s = settings(monitoring_enabled=True, monitoring_listen_address="0.0.0.0", monitoring_scrapers=["10.0.0.5"],
                 llama_cpp_instances={"big": {"model_path": "/m.gguf", "listen": "::", "port": 8081}})
    node, llama = decide.targets("box1", "gpu-01.example", s)
    assert node.address == "gpu-01.example:9100" and not node.note
    assert llama.address == "gpu-01.example:8081"
    (v6,) = decide.targets("box1", "fd00::5", settings(llama_cpp_instances={"a": {"model_path": "/m", "listen": "::"}}))
    assert v6.address == "[fd00::5]:8080"


def test_keyed_instances_get_a_job_each_with_a_credentials_file_and_no_key(tmp_path):
    key = tmp_path / "key"
    key.write_text(SECRET + "\n")
    s = settings(monitoring_enabled=True,
                 llama_cpp_instances={"a": {"model_path": "/a.gguf", "port": 8080, "api_key_file": str(key)},
                                      "b": {"model_path": "/b.gguf", "port": 8081},
                                      "quiet": {"model_path": "/c.gguf", "port": 8082, "metrics": False}},
                 vllm_instances={"v": {"model_path": "/v", "port": 8000}})
    config = decide.scrape_config({"box1": decide.targets("box1", "box1", s, "/etc/prom/keys")})
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"v100kit-node", "v100kit-llama-server-box1-a", "v100kit-llama-server", "v100kit-vllm"}
    # Prometheus' authorization block (scrape_config: authorization: type, credentials_file)
    assert jobs["v100kit-llama-server-box1-a"]["authorization"] == {
        "type": "Bearer", "credentials_file": "/etc/prom/keys/box1_llama-server@a.key"}
    assert "authorization" not in jobs["v100kit-llama-server"] and "authorization" not in jobs["v100kit-vllm"]
    assert [c["labels"] for c in jobs["v100kit-llama-server"]["static_configs"]] == [
        {"host": "box1", "engine": "llama-server", "instance_name": "b"}]  # metrics: false is no target
    assert SECRET not in json.dumps(config)


def test_a_ray_clusters_instance_is_scraped_on_its_head_only():
    s = dict(ray_cluster="c", ray_head="n1", ray_interface="eth1", vllm_instances={"v": {"model_path": "/v"}})
    assert [t.job for t in decide.targets("n1", "n1", settings(**s))] == ["v100kit-vllm"]
    assert decide.targets("n2", "n2", settings(**s)) == []


def test_metrics_md_lists_every_metric():
    text = (ROOT / "roles/monitoring/METRICS.md").read_text()
    assert [n for n in decide.METRICS if f"| `{n}` |" not in text] == []


def test_serious_xids_are_the_doctors():
    assert set(decide.SERIOUS_XIDS) == SERIOUS_XIDS


def test_rules_and_dashboard_use_only_the_listed_metric_names():
    known_engine = re.compile(r"^(up|llamacpp:[a-z_]+|vllm:[a-z_]+)$")
    rules = yaml.safe_load(RULES.read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    dash = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"\b([a-z_][a-z0-9_]*(?::[a-z0-9_]+)?)\s*(?=[{)\s=<>]|$)", e)
             if n.startswith(("v100kit_", "llamacpp:", "vllm:")) or n == "up"}
    unknown = {n for n in names if n.startswith("v100kit_") and n not in decide.METRICS}
    unknown |= {n for n in names if not n.startswith("v100kit_") and not known_engine.match(n)}
    assert unknown == set()
    assert {"v100kit_gpu_xid_errors", "v100kit_gpu_count", "v100kit_check_ok",
            "v100kit_gpu_ecc_uncorrected_volatile_errors", "v100kit_gpu_retired_pages_pending",
            "v100kit_gpu_clock_event_reason_active", "v100kit_gpu_xid_log_readable", "up",
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} <= names
    # every check name an alert matches is one doctor_local.py writes
    from roles.monitoring import doctor_local
    written = {c for c, _, _ in doctor_local.judge(_facts(gpus=["0"]), _expect())}
    for e in exprs:
        for pattern in re.findall(r'check=~?"([^"]+)"', e):
            assert any(re.fullmatch(pattern, c) for c in written), pattern


@needs_promtool
def test_promtool_accepts_the_shipped_rules():
    out = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"SUCCESS: (\d+) rules found", out.stdout)


@needs_promtool
def test_promtool_accepts_a_generated_configuration(tmp_path, monkeypatch):
    key = tmp_path / "key"
    key.write_text(SECRET + "\n")
    inventory = tmp_path / "inv.py"
    hosts = [("gpu-01", {"ssh_hostname": "10.0.0.11", "monitoring_enabled": True,
                         "monitoring_listen_address": "0.0.0.0", "monitoring_scrapers": ["10.0.0.5"],
                         "llama_cpp_instances": {"a": {"model_path": "/a.gguf", "listen": "0.0.0.0",
                                                       "api_key_file": str(key)}}}),
             ("gpu-02", {"vllm_instances": {"v": {"model_path": "/v"}}})]
    inventory.write_text(f"boxes = {hosts!r}\n")
    creds = tmp_path / "creds"
    out = tmp_path / "prometheus.yml"
    rc = _main(["monitoring", "scrape-config", str(inventory), "--credentials-dir", str(creds), "--write-credentials",
                "--rules", str(RULES)], out)
    assert rc == 0
    text = out.read_text()
    assert SECRET not in text
    checked = subprocess.run([PROMTOOL, "check", "config", str(out)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    key_file = creds / "gpu-01_llama-server@a.key"
    assert key_file.read_text() == SECRET and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    config = yaml.safe_load(text)
    targets = {c["targets"][0] for j in config["scrape_configs"] for c in j["static_configs"]}
    assert targets == {"10.0.0.11:9100", "10.0.0.11:8080", "127.0.0.1:8000"}


def _main(argv: list[str], out: Path) -> int:
    """Run the command with its stdout into `out`."""
    import contextlib
    with out.open("w") as f, contextlib.redirect_stdout(f):
        return main(argv)


def test_json_and_exit_statuses(tmp_path, capsys):
    inventory = tmp_path / "inv.py"
    inventory.write_text("boxes = [('ok-01', {'monitoring_enabled': True}), ('bad-01', {'monitoring_enabeld': True})]\n")
    assert main(["monitoring", "scrape-config", str(inventory), "--json"]) == 1  # a host's settings refused
    doc = json.loads(capsys.readouterr().out)
    assert doc["hosts"]["bad-01"]["error"] == "refused" and "monitoring_enabeld" in doc["hosts"]["bad-01"]["problems"][0]
    assert doc["hosts"]["ok-01"]["targets"][0]["address"] == "127.0.0.1:9100"
    assert [j["job_name"] for j in doc["config"]["scrape_configs"]] == ["v100kit-node"]
    assert main(["monitoring", "scrape-config", str(inventory), "--limit", "ok-01"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["scrape_configs"][0]["static_configs"][0]["labels"] == {"host": "ok-01"}
    assert main(["monitoring", "scrape-config", str(inventory), "--limit", "nope"]) == 2
    assert main(["monitoring", "scrape-config", str(tmp_path / "missing.py")]) == 2


def _expect(**kw) -> dict:
    base = {"driver_version": "535.261.03", "driver_packages": ["nvidia-driver", "libnvidia-ml1"],
            "links": [{"check": "llama.cpp build in use", "link": "/opt/llama.cpp/current",
                       "target": "/opt/llama.cpp/p", "stamp": None}],
            "units": [{"unit": "llama-server@tiny", "needs_gpu": False, "n_gpu_layers": 99},
                      {"unit": "vllm@v", "needs_gpu": True}],
            "serious_xids": list(decide.SERIOUS_XIDS)}
    return {**base, **kw}


def _facts(gpus=(), **kw) -> dict:
    base = {"loaded_module": "535.261.03" if gpus else None, "nvidia_smi_rc": 0 if gpus else 9, "nvidia_smi": "",
            "gpus": list(gpus), "persistence_off": [],
            "installed": {"nvidia-driver": "535.261.03-1~deb12u1", "libnvidia-ml1": "535.261.03-1~deb12u1"},
            "holds": {"nvidia-driver", "libnvidia-ml1"},
            "enabled": {"nvidia-persistenced.service": "enabled", "llama-server@tiny.service": "enabled"},
            "active": {"nvidia-persistenced.service": "active", "llama-server@tiny.service": "active",
                       "vllm@v.service": "active"},
            "modules": "", "xid_lines": [], "links": {"/opt/llama.cpp/current": "/opt/llama.cpp/p"},
            "stamped": {},
            "servers": {"llama-server@tiny": {"main_pid": 42, "compute_apps": ["42, 1500"],
                                 "log": ["ggml_cuda_init: found 1 CUDA devices:",
                                         "load_tensors: offloaded 33/33 layers to GPU"]}}}
    return {**base, **kw}


def test_doctor_on_the_box_without_a_gpu_skips_the_gpu_checks():
    from roles.monitoring import doctor_local
    rows = {c: s for c, s, _ in doctor_local.judge(_facts(), _expect())}
    assert rows["nvidia-persistenced enabled"] == "ok" and rows["driver packages held"] == "ok"
    assert rows["llama-server@tiny running"] == "ok" and rows["llama.cpp build in use"] == "ok"
    for check in ("llama-server@tiny serves from the GPU", "persistence mode on", "no serious Xid errors this boot",
                  "loaded module matches the userland", "nvidia-smi answers", "vllm@v running"):
        assert rows[check] == "skipped", check


def test_doctor_on_the_box_with_a_gpu_healthy_and_broken():
    from roles.monitoring import doctor_local
    healthy = {c: s for c, s, _ in doctor_local.judge(_facts(gpus=["0"]), _expect())}
    assert {s for s in healthy.values()} == {"ok"}, healthy
    broken = _facts(gpus=["0"], loaded_module="535.247.01", holds=set(), persistence_off=["0"],
                    xid_lines=["NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."],
                    enabled={"nvidia-persistenced.service": "disabled"},
                    active={"nvidia-persistenced.service": "inactive", "llama-server@tiny.service": "active"},
                    servers={"llama-server@tiny": {"main_pid": 42, "compute_apps": [],
                                      "log": ["ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device"]}})
    rows = {c: (s, e) for c, s, e in doctor_local.judge(broken, _expect())}
    for check in ("loaded module matches the userland", "driver packages held", "nvidia-persistenced enabled",
                  "persistence mode on", "no serious Xid errors this boot", "llama-server@tiny serves from the GPU",
                  "vllm@v running"):
        assert rows[check][0] == "broken", (check, rows[check])
    assert "79" in rows["no serious Xid errors this boot"][1]
    assert "failed to initialize CUDA" in rows["llama-server@tiny serves from the GPU"][1]


@needs_promtool
def test_doctor_metrics_are_valid_exposition_format(tmp_path):
    from roles.monitoring import doctor_local
    text = doctor_local.render(doctor_local.judge(_facts(), _expect()), 1764650000.0)
    path = tmp_path / "v100kit_doctor.prom"
    path.write_text(text)
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'v100kit_check_ok{check="nvidia-persistenced enabled"} 1' in text
    assert 'v100kit_check_skipped{check="llama-server@tiny serves from the GPU"} 1' in text
    assert "v100kit_doctor_last_run_timestamp_seconds 1764650000.000" in text


def test_doctor_script_runs_with_the_distributions_python_alone(tmp_path):
    """On the box it is /usr/bin/python3 with the standard library only: run it so (isolated mode, no site
    packages) against this machine, which has no nvidia module and no systemd: every GPU check skipped, the file
    written atomically."""
    python = shutil.which("python3", path="/usr/bin")
    if python is None:
        pytest.skip("no /usr/bin/python3 here")
    lib = tmp_path / "lib"
    lib.mkdir()
    for src in ("roles/monitoring/doctor_local.py", "roles/llama_cpp/residency.py"):
        shutil.copy(ROOT / src, lib)
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(_expect()))
    out = tmp_path / "v100kit_doctor.prom"
    run = subprocess.run([python, "-I", "-S", str(lib / "doctor_local.py"), "--expect", str(expect), "--output",
                          str(out), "--print"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    assert 'v100kit_check_skipped{check="persistence mode on"} 1' in text
    assert re.search(r"^v100kit_doctor_last_run_timestamp_seconds \d+\.\d+$", text, re.M)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


@pytest.mark.parametrize("interval", ["0", "-5"])
def test_a_scrape_interval_below_one_second_is_a_bad_argument(tmp_path, capsys, interval):
    # Prometheus' own parser refuses "-5s" (promtool check config: 'not a valid duration string') and reads "0s" as
    # its 1m default: either is a bad argument (exit 2, naming the option and the value), never a configuration
    inventory = tmp_path / "inv.py"
    inventory.write_text("boxes = [('ok-01', {'monitoring_enabled': True})]\n")
    with pytest.raises(SystemExit) as e:
        main(["monitoring", "scrape-config", str(inventory), "--scrape-interval", interval])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--scrape-interval" in captured.err and interval in captured.err


@pytest.mark.parametrize("alert, metric, setting", [
    ("V100kitDoctorStale", "v100kit_doctor_last_run_timestamp_seconds", "monitoring_doctor_interval_s"),
    ("V100kitGpuExporterStale", "v100kit_gpu_exporter_last_run_timestamp_seconds", "monitoring_gpu_interval_s")])
def test_the_stale_alerts_hold_for_every_allowed_interval(alert, metric, setting):
    # each Stale alert fires when its timer's last run is older than its threshold: a timer allowed to run less often
    # than that (monitoring_doctor_interval_s 3600 was accepted) would fire it between every two runs
    rules = yaml.safe_load(RULES.read_text())
    expr = next(r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert)
    threshold = int(re.search(re.escape(metric) + r" > (\d+)", expr).group(1))
    longest = Settings.model_fields[setting].metadata
    le = next(m.le for m in longest if hasattr(m, "le") and m.le is not None)
    assert 2 * le <= threshold, f"{setting} may be {le} s; {alert} fires after {threshold} s"


def test_a_missing_key_file_writes_no_credentials_and_names_the_host_and_setting(tmp_path, capsys):
    # two hosts with an instance of the same name; gpu-02's key file is missing: nothing is written for either
    # (gpu-01's was written before the fix), the error names the host and the setting, and --json still prints one
    # object with the cause
    key = tmp_path / "key"
    key.write_text(SECRET + "\n")
    hosts = [(h, {"llama_cpp_instances": {"gemma": {"model_path": "/a.gguf", "listen": "0.0.0.0",
                                                    "api_key_file": str(f)}}})
             for h, f in (("gpu-01", key), ("gpu-02", tmp_path / "missing.key"))]
    inventory = tmp_path / "inv.py"
    inventory.write_text(f"boxes = {hosts!r}\n")
    creds = tmp_path / "creds"
    rc = main(["monitoring", "scrape-config", str(inventory), "--credentials-dir", str(creds), "--write-credentials",
               "--json"])
    captured = capsys.readouterr()
    assert rc == 1
    assert not creds.exists() or not any(creds.iterdir())
    assert "gpu-02: llama_cpp_instances.gemma.api_key_file" in captured.err and "gpu-01:" not in captured.err
    doc = json.loads(captured.out)
    assert doc["error"] == "credentials" and "gpu-02: llama_cpp_instances.gemma.api_key_file" in doc["cause"]
    assert SECRET not in captured.out + captured.err



def test_an_lmdeploy_instance_is_a_target_of_its_own_engine_and_its_key_is_written(tmp_path, capsys):
    """A third engine reaches the scrape configuration through the registry: job v100kit-lmdeploy, labelled with its
    unit template, and a keyed instance's credentials file written from lmdeploy_instances.NAME.api_key_file (the
    command read only llama-server's and vLLM's settings before)."""
    key = tmp_path / "key"
    key.write_text(SECRET + "\n")
    instances = {"q": {"model_path": "/srv/q", "port": 23333},
                 "k": {"model_path": "/srv/k", "port": 23334, "api_key_file": str(key)}}
    found = decide.targets("box1", "box1", settings(lmdeploy_instances=instances), "/etc/prom/keys")
    assert [(t.job, t.address, t.labels, t.credentials_file) for t in found] == [
        ("v100kit-lmdeploy", "127.0.0.1:23334", {"host": "box1", "engine": "lmdeploy", "instance_name": "k"},
         "/etc/prom/keys/box1_lmdeploy@k.key"),
        ("v100kit-lmdeploy", "127.0.0.1:23333", {"host": "box1", "engine": "lmdeploy", "instance_name": "q"}, None)]
    inventory = tmp_path / "inv.py"
    inventory.write_text(f"boxes = [('gpu-01', {{'lmdeploy_instances': {instances!r}}})]\n")
    creds = tmp_path / "creds"
    assert main(["monitoring", "scrape-config", str(inventory), "--credentials-dir", str(creds),
                 "--write-credentials", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["credentials"] == [{"file": str(creds / "gpu-01_lmdeploy@k.key"), "host": "gpu-01", "unit": "lmdeploy@k"}]
    assert (creds / "gpu-01_lmdeploy@k.key").read_text() == SECRET
    assert {j["job_name"] for j in doc["config"]["scrape_configs"]} == {"v100kit-lmdeploy", "v100kit-lmdeploy-gpu-01-k"}


def test_the_box_expects_each_engines_venv_and_units_from_the_registry():
    """The expectations of a host with vLLM and LMDeploy plans: each venv's link and stamp, each unit waiting for a
    GPU; judged on the box without a GPU the units skip, and a venv whose stamp is missing is broken."""
    from types import SimpleNamespace

    from roles.monitoring import doctor_local

    pin = SimpleNamespace(version="580.95.05", packages={"cuda-drivers-580": "580.95.05-1"})
    vllm = SimpleNamespace(venv="/opt/vllm/0.10.1", serves=True, instances=[SimpleNamespace(name="v")])
    lmd = SimpleNamespace(venv="/opt/lmdeploy/0.15.0-py3.13-ab", instances=[SimpleNamespace(name="q")])
    expect = decide.expectations(settings(), pin, {"llama_cpp": None, "vllm": vllm, "lmdeploy": lmd})
    assert expect["links"] == [
        {"check": "vLLM venv in use", "link": "/opt/vllm/current", "target": "/opt/vllm/0.10.1",
         "stamp": "/opt/vllm/0.10.1/.v100kit-venv.json"},
        {"check": "LMDeploy venv in use", "link": "/opt/lmdeploy/current", "target": "/opt/lmdeploy/0.15.0-py3.13-ab",
         "stamp": "/opt/lmdeploy/0.15.0-py3.13-ab/.v100kit-venv.json"}]
    assert expect["units"] == [{"unit": "vllm@v", "needs_gpu": True}, {"unit": "lmdeploy@q", "needs_gpu": True}]
    facts = _facts(links={"/opt/vllm/current": "/opt/vllm/0.10.1",
                          "/opt/lmdeploy/current": "/opt/lmdeploy/0.15.0-py3.13-ab"},
                   stamped={"/opt/vllm/0.10.1/.v100kit-venv.json": True,
                            "/opt/lmdeploy/0.15.0-py3.13-ab/.v100kit-venv.json": False})
    rows = {c: (s, e) for c, s, e in doctor_local.judge(facts, {**_expect(), **expect})}
    assert rows["vLLM venv in use"][0] == "ok"
    assert rows["LMDeploy venv in use"] == (
        "broken", "current -> /opt/lmdeploy/0.15.0-py3.13-ab, settings say /opt/lmdeploy/0.15.0-py3.13-ab "
                  "(not installed and checked)")
    assert rows["lmdeploy@q running"] == ("skipped", "no GPU visible (nvidia-smi): not started")
    assert "llama-server@tiny running" not in rows  # the units are the expectations', not a fixed list


@needs_promtool
def test_a_relative_rule_file_is_written_as_the_path_promtool_resolves(tmp_path, monkeypatch):
    # Prometheus reads a relative rule_files entry against the configuration file's directory: the path as typed
    # (files/monitoring/alerts.yml, from the repository) did not resolve beside a configuration written elsewhere
    monkeypatch.chdir(ROOT)
    inventory = tmp_path / "inv.py"
    inventory.write_text("boxes = [('ok-01', {'monitoring_enabled': True})]\n")
    out = tmp_path / "prometheus.yml"
    assert _main(["monitoring", "scrape-config", str(inventory), "--rules", "files/monitoring/alerts.yml"], out) == 0
    checked = subprocess.run([PROMTOOL, "check", "config", str(out)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_missing_rule_file_is_a_bad_argument(tmp_path, capsys):
    inventory = tmp_path / "inv.py"
    inventory.write_text("boxes = [('ok-01', {'monitoring_enabled': True})]\n")
    with pytest.raises(SystemExit) as e:
        main(["monitoring", "scrape-config", str(inventory), "--rules", "no/such/alerts.yml"])
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--rules" in captured.err and "no/such/alerts.yml" in captured.err
