"""Plan-level (tests/plan/harness.py: facts in, commands out) tests of the monitoring role: the distribution's node
exporter on the address the settings name, configured before its package starts it, the GPU exporter's and the
doctor's timers as the service user, the refusals before any change, a second deploy that changes nothing, and the
removal when monitoring is turned off again.

Expected values come from outside the role: Debian's package (its unit's ExecStart=/usr/bin/prometheus-node-exporter
$ARGS, its compiled-in textfile directory /var/lib/prometheus/node-exporter: `prometheus-node-exporter --help` of
bookworm's 1.5.0-1+b6), the node exporter's flags (--web.listen-address, --collector.textfile.directory), systemd's
directives (systemd.resource-control(5) IPAddressAllow/IPAddressDeny, systemd.timer(5)), and the README's table of
the default driver per OS (Debian 13: 550.163.01)."""

from __future__ import annotations

import json
import re

import pytest

import roles.monitoring.deploy as role
from roles.settings import SettingsError
from tests.plan.harness import DEBIAN_13, ROOT, converged, plan_commands, plan_uploads, plan_uploads_raw

DROPIN = "/etc/systemd/system/prometheus-node-exporter.service.d/v100kit.conf"
TIMERS = ("v100kit-gpu-exporter.timer", "v100kit-doctor.timer")
UNITS = ("v100kit-gpu-exporter.service", "v100kit-doctor.service", *TIMERS)
NODE = "prometheus-node-exporter.service"


@pytest.fixture(autouse=True)
def gpu_exporter(tmp_path, monkeypatch):
    """roles/monitoring/gpu_exporter.py is another helper's (issue 29); where it is not in this tree yet, the role
    installs a stand-in with the same interface (--output PATH), so that the plan can be made."""
    if not role.GPU_EXPORTER.is_file():
        stand_in = tmp_path / "gpu_exporter.py"
        stand_in.write_text("# stand-in for roles/monitoring/gpu_exporter.py (--output PATH)\n")
        monkeypatch.setattr(role, "GPU_EXPORTER", stand_in)


def running(*units: str) -> dict:
    """systemd's answers for units that run and are enabled (as tests/plan/test_instance_restarts.py)."""
    out = {}
    for u in units:
        out[f"--property SubState {u}"] = [f"Id={u}", "SubState=running"]
        out[f"--property UnitFileState {u}"] = [f"Id={u}", "UnitFileState=enabled"]
    return out


#: the answers of pyinfra's fact commands (the harness records those too): not changes
FACTS = ("! (test -e ", "test -e ", "if command -v systemctl ")


def ours(cmds: list) -> list[str]:
    """The changing commands of the monitoring role: its package, files and units (fact reads left out)."""
    words = ("prometheus-node-exporter", "v100kit-gpu-exporter", "v100kit-doctor", "/usr/local/lib/v100kit",
             "/etc/v100kit", "/var/lib/prometheus")
    return [str(c) for c in cmds if any(w in str(c) for w in words) and not str(c).startswith(FACTS)]


def deploy_on(data: dict, responses: dict | None = None):
    return plan_uploads(DEBIAN_13, data, responses=responses)


def converged_host(data: dict) -> dict:
    """The fake host a first deploy of `data` leaves (its files, modes and owners), with the units running."""
    cmds, uploads = plan_uploads_raw(DEBIAN_13, data)
    # and the packages it installed (dpkg -l, as pyinfra's DebPackages fact reads it)
    installed = {"dpkg -l": ["ii  linux-image-generic  6.8.0.45.45  amd64  Generic Linux kernel image",
                             "ii  prometheus-node-exporter  1.9.0-1+b4  amd64  Prometheus exporter",
                             "ii  python3  3.13.5-1  amd64  interactive high-level object-oriented language"]}
    return {**converged(cmds, uploads), **running(NODE, *TIMERS), **installed}


def test_node_exporter_listens_on_the_loopback_by_default_from_its_first_start():
    cmds, uploads = deploy_on({"monitoring_enabled": True})
    dropin = uploads[DROPIN]
    assert re.search(r"^ExecStart=$\n^ExecStart=/usr/bin/prometheus-node-exporter "
                     r"--web.listen-address=127\.0\.0\.1:9100 "
                     r"--collector\.textfile\.directory=/var/lib/prometheus/node-exporter$", dropin, re.M), dropin
    assert "IPAddressDeny=any" in dropin and re.search(r"^IPAddressAllow=localhost$", dropin, re.M)
    text = [str(c) for c in cmds]
    install = next(i for i, c in enumerate(text) if "apt-get" in c and "install" in c and "prometheus-node-exporter" in c)
    placed = next(i for i, c in enumerate(text) if DROPIN in c)
    reload = next(i for i, c in enumerate(text) if c.strip() == "systemctl daemon-reload")
    # the package starts its service when installed: the drop-in and systemd's reload come first
    assert placed < reload < install, (placed, reload, install)
    assert "--no-install-recommends" in text[install]
    for unit in (NODE, *TIMERS):
        assert f"systemctl enable {unit}" in text and f"systemctl start {unit}" in text


def test_timers_run_the_scripts_as_the_service_user_into_the_textfile_directory():
    cmds, uploads = deploy_on({"monitoring_enabled": True, "monitoring_gpu_interval_s": 20,
                               "monitoring_doctor_interval_s": 600})
    gpu = uploads["/etc/systemd/system/v100kit-gpu-exporter.service"]
    doctor = uploads["/etc/systemd/system/v100kit-doctor.service"]
    for unit, script, prom in ((gpu, "gpu_exporter.py", "v100kit_gpu.prom"),
                               (doctor, "doctor_local.py", "v100kit_doctor.prom")):
        assert "Type=oneshot" in unit and "User=llm" in unit and "NoNewPrivileges=yes" in unit
        assert "ProtectSystem=strict" in unit and "ReadWritePaths=/var/lib/prometheus/node-exporter" in unit
        assert re.search(rf"^ExecStart=/usr/bin/python3 /usr/local/lib/v100kit/{script} .*--output "
                         rf"/var/lib/prometheus/node-exporter/{prom}$", unit, re.M), unit
        assert f"/usr/local/lib/v100kit/{script}" in uploads
    # both read this boot's kernel log through journalctl -k (the GPU exporter for its Xid counts)
    assert "SupplementaryGroups=systemd-journal" in doctor and "SupplementaryGroups=systemd-journal" in gpu
    assert "OnUnitActiveSec=20s" in uploads["/etc/systemd/system/v100kit-gpu-exporter.timer"]
    assert "OnUnitActiveSec=600s" in uploads["/etc/systemd/system/v100kit-doctor.timer"]
    # the doctor's own residency judgement travels with it
    assert uploads["/usr/local/lib/v100kit/residency.py"] == (ROOT / "roles/llama_cpp/residency.py").read_text()
    assert "chown root:llm /var/lib/prometheus/node-exporter" in [str(c) for c in cmds]


def test_the_doctors_expectations_are_the_plans_and_hold_no_secret(tmp_path):
    key = tmp_path / "key"
    key.write_text("sekrit-key-0123456789\n")
    data = {"monitoring_enabled": True,
            "llama_cpp_instances": {"m": {"model_path": "/srv/m.gguf", "api_key_file": str(key)}}}
    cmds, uploads = deploy_on(data, responses={"test -e /srv/m.gguf ||": [
        "user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=10 '/srv/m.gguf'"]})
    expect = json.loads(uploads["/etc/v100kit/doctor-local.json"])
    assert expect["driver_version"] == "550.163.01"  # README: Debian 13's default driver
    assert expect["units"] == [{"unit": "llama-server@m", "needs_gpu": False, "n_gpu_layers": 99}]
    [link] = expect["links"]  # no vLLM or LMDeploy instance: their venvs are not expected
    assert (link["check"], link["link"], link["stamp"]) == ("llama.cpp build in use", "/opt/llama.cpp/current", None)
    assert link["target"].startswith("/opt/llama.cpp/pypi-0.3.36-sm70-cuda12.4-")
    assert 79 in expect["serious_xids"]
    assert "sekrit" not in json.dumps(uploads.get("/etc/v100kit/doctor-local.json"))
    assert not [c for c in cmds if "sekrit" in str(c)]


def test_a_routable_address_needs_the_scrapers_named_before_any_change():
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"monitoring_enabled": True, "monitoring_listen_address": "10.0.0.2"})
    assert "monitoring_listen_address = '10.0.0.2'" in str(e.value) and "monitoring_scrapers" in str(e.value)
    _, uploads = deploy_on({"monitoring_enabled": True, "monitoring_listen_address": "10.0.0.2",
                            "monitoring_scrapers": ["10.0.0.5", "192.168.7.0/24"]})
    assert "--web.listen-address=10.0.0.2:9100" in uploads[DROPIN]
    assert re.search(r"^IPAddressAllow=localhost 10\.0\.0\.5 192\.168\.7\.0/24$", uploads[DROPIN], re.M)


def test_a_port_an_instance_uses_is_refused_before_any_change():
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"monitoring_enabled": True, "monitoring_node_exporter_port": 8080,
                                  "llama_cpp_instances": {"m": {"model_path": "/srv/m.gguf"}}},
                      responses={"test -e /srv/m.gguf ||": [
                          "user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=10 '/srv/m.gguf'"]})
    assert "monitoring_node_exporter_port = 8080" in str(e.value) and "llama-server@m" in str(e.value)


def test_bad_settings_name_the_setting():
    for data, key in (({"monitoring_listen_address": "localhost"}, "monitoring_listen_address"),
                      ({"monitoring_scrapers": ["10.0.0.300"]}, "monitoring_scrapers"),
                      ({"monitoring_gpu_interval_s": 1}, "monitoring_gpu_interval_s"),
                      ({"monitoring_enable": True}, "monitoring_enable")):
        with pytest.raises(SettingsError) as e:
            plan_commands(DEBIAN_13, data)
        assert key in str(e.value), str(e.value)
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"monitoring_enable": True})
    assert "did you mean 'monitoring_enabled'" in str(e.value)


def test_a_second_deploy_changes_nothing():
    data = {"monitoring_enabled": True}
    again, _ = deploy_on(data, responses=converged_host(data))
    assert ours(again) == [], ours(again)


def test_a_changed_interval_reruns_the_timer_units_and_their_services_once():
    host = converged_host({"monitoring_enabled": True})
    again, _ = deploy_on({"monitoring_enabled": True, "monitoring_doctor_interval_s": 120}, responses=host)
    text = [c for c in ours(again) if c.startswith("systemctl")]
    assert "systemctl start v100kit-doctor.service" in text
    assert not [c for c in text if NODE in c]  # the node exporter's own configuration did not change


def test_a_changed_address_restarts_the_node_exporter():
    host = converged_host({"monitoring_enabled": True})
    again, _ = deploy_on({"monitoring_enabled": True, "monitoring_node_exporter_port": 9101}, responses=host)
    assert f"systemctl restart {NODE}" in ours(again)


def test_off_by_default_changes_nothing_on_a_box_that_never_had_it():
    assert ours(plan_commands(DEBIAN_13, {})) == []


def test_turned_off_again_removes_the_timers_and_the_drop_in():
    host = converged_host({"monitoring_enabled": True})
    off = ours(plan_commands(DEBIAN_13, {}, responses=host))
    for unit in (NODE, *TIMERS):
        assert f"systemctl stop {unit}" in off and f"systemctl disable {unit}" in off
    for path in (DROPIN, "/etc/v100kit/doctor-local.json", *(f"/etc/systemd/system/{u}" for u in UNITS)):
        assert f"rm -f {path}" in off, path
    assert not [c for c in off if "apt-get" in c]  # the package stays (stopped and disabled)


@pytest.mark.parametrize("on", [False, True])
def test_the_plan_says_whether_prompts_are_logged_and_where(on):
    """`v100kit plan` (read-only preflight of a fake host, tests/plan/harness.py preflight_cluster) says per engine
    whether its request logger runs, and where its prompts then go: llama-server's to a file per request under
    /var/log/llama-server/NAME (--log-prompts-dir), never the journal, at the pin's own -lv (4 at pypi-0.3.36)."""
    from tests.plan.harness import preflight_cluster
    from v100kit.plan import summarize, table

    data = {"llama_cpp_instances": {"tiny": {"model_source": "https://models.example/tiny.gguf",
                                             "model_sha256": "a" * 64}},
            "llama_cpp_log_requests": on, "monitoring_enabled": True}
    node, plan = preflight_cluster({"box": (DEBIAN_13, data, {})}, {}, "box")
    out = summarize(node, plan)
    line = next(x for x in table({"box": out}).splitlines() if x.startswith("   llama-server request logging"))
    if on:
        assert "on: each request's prompt goes to a file in /var/log/llama-server/NAME/" in line, line
        assert "the journal gets none (-lv 4)" in line, line
    else:
        assert "off: no prompt file, and -lv 4 logs no request text" in line, line
    assert out["monitoring"]["node_exporter"] == "127.0.0.1:9100"
    assert any(x.startswith("   monitoring: node exporter on 127.0.0.1:9100 (loopback only)")
               for x in table({"box": out}).splitlines())


@pytest.mark.parametrize("everyone", [["0.0.0.0/0"], ["::/0"], ["0.0.0.0/1", "128.0.0.0/1"]])
def test_scraper_networks_covering_every_address_are_refused(everyone):
    # systemd's IPAddressAllow=0.0.0.0/0 allows every IPv4 peer: the unauthenticated node exporter would be open
    with pytest.raises(SettingsError) as e:
        plan_commands(DEBIAN_13, {"monitoring_enabled": True, "monitoring_listen_address": "10.0.0.2",
                                  "monitoring_scrapers": ["10.0.0.5", *everyone]})
    assert "monitoring_scrapers = [" in str(e.value) and "let every IPv" in str(e.value)
    assert all(n in str(e.value) for n in everyone)
