"""Prompts stay out of the logs by default, and go to the journal when the setting says so (tests/tiers.toml suite
prompt-logs; issue 29).

llama-server (lab-trixie's llama-server@tiny, API key set): a request whose prompt carries a unique marker, then the
journal (journalctl, all units, this boot) and every file under /var/log (read as text, binary journal files
included) are searched for it: not found with the defaults (-lv 4), and after a deploy with
llama_cpp_log_requests: true found in one file of the instance's prompt directory (/var/log/llama-server/tiny,
llama-server's --log-prompts-dir; the service user's, mode 0700) and still not in the journal. vLLM does not start on the GPU-less
lab hosts (its unit is condition-skipped), so no request can reach it there: for vLLM the rendered arguments of
/etc/vllm/tiny.env are parsed by the locked release's own argument parser inside the host's venv (as
tests/lab/test_vllm.py does) and its request logger must be off by default and on with vllm_log_requests: true. On a
host where vllm@tiny runs (a GPU), the marker test runs against it as well. The hosts are deployed with CI's
settings again at the end.
"""

from __future__ import annotations

import shlex
import uuid

import pytest
import testinfra

from lab.data import LLAMA_HOSTS, LLAMA_PORTS, VLLM_HOSTS, VLLM_PORT, api_key_file
from lab.harness import spec
from lab.provision import deploy
from roles.vllm.decide import CURRENT as VLLM_CURRENT
from tests.lab.test_deploy import data_args
from tests.lab.test_llama_cpp import http

LLAMA_HOST, VLLM_HOST = LLAMA_HOSTS[0], VLLM_HOSTS[0]
#: the journal of this boot (every unit) and every file under /var/log, binary ones read as text: journald keeps
#: small fields uncompressed, so a prompt in the journal's files is found there too
SEARCH = ("journalctl --sync 2>/dev/null; sleep 1; "
          "{ journalctl -b --no-pager -o cat 2>/dev/null | grep -c -F -- MARKER; "
          "grep -r -l -a -F -- MARKER /var/log 2>/dev/null; } ; true")


def found(provisioned, host: str, marker: str) -> tuple[int, list[str]]:
    """(journal lines holding `marker`, files under /var/log holding it) on `host`."""
    rc, out = provisioned.lab.run(spec(host), SEARCH.replace("MARKER", shlex.quote(marker)))
    lines = out.split()
    return int(lines[0]) if lines and lines[0].isdigit() else 0, lines[1:]


def marker() -> str:
    return f"v100kit-marker-{uuid.uuid4().hex}"


def send_llama(marker_text: str) -> None:
    key = api_key_file().read_text().strip()  # sent from here in a header: never on a command line
    status, reply = http(LLAMA_PORTS[LLAMA_HOST], "/v1/completions",
                         {"prompt": f"Repeat after me: {marker_text}", "max_tokens": 4}, key=key)
    assert status == 200, reply


@pytest.fixture(scope="module")
def logging_on(provisioned):
    """A function that deploys the engines' hosts with request logging on, or off (CI's settings); off again after
    the module if a test left it on."""
    state = {"on": False, "runs": 0}

    def switch(on: bool) -> None:
        data = data_args({"llama_cpp_log_requests": True, "vllm_log_requests": True}) if on else []
        state["runs"] += 1
        run = deploy(f"prompt-logs-{'on' if on else 'off'}-{state['runs']}",
                     ["--limit", LLAMA_HOST, "--limit", VLLM_HOST, *data])
        assert run.rc == 0, run.stderr[-3000:]
        state["on"] = on
    yield switch
    if state["on"]:
        switch(False)


def vllm_logs_requests(provisioned) -> bool:
    """Whether the vLLM release installed on VLLM_HOST, parsing /etc/vllm/tiny.env's VLLM_ARGS with its own parser,
    runs its request logger."""
    script = (
        "import shlex\n"
        "try:\n    from vllm.utils import FlexibleArgumentParser\n"
        "except ImportError:\n    from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.entrypoints.openai.cli_args import make_arg_parser\n"
        "env = dict(l.split('=', 1) for l in open('/etc/vllm/tiny.env').read().splitlines())\n"
        "ns = make_arg_parser(FlexibleArgumentParser()).parse_args(shlex.split(env['VLLM_ARGS']))\n"
        "on = getattr(ns, 'enable_log_requests', None)\n"
        "print('LOGS', on if on is not None else not ns.disable_log_requests)\n")
    host = testinfra.get_host(provisioned.lab.testinfra_url(spec(VLLM_HOST)))
    host.run(f"printf %s {shlex.quote(script)} > /tmp/vllm-logs-probe.py && chmod 644 /tmp/vllm-logs-probe.py")
    out = host.check_output(f"cd /tmp && runuser -u llm -- env HF_HUB_OFFLINE=1 HOME=/tmp "
                            f"{VLLM_CURRENT}/bin/python /tmp/vllm-logs-probe.py 2>/dev/null")
    line = [x for x in out.splitlines() if x.startswith("LOGS ")][-1]
    return line.split()[1] == "True"


def vllm_running(provisioned) -> bool:
    return provisioned.lab.run(spec(VLLM_HOST), "systemctl is-active vllm@tiny")[1].strip() == "active"


def send_vllm(marker_text: str) -> None:
    key = api_key_file().read_text().strip()
    status, reply = http(VLLM_PORT, "/v1/completions", {"model": "tiny", "prompt": f"Repeat: {marker_text}",
                                                        "max_tokens": 4}, key=key, timeout=600)
    assert status == 200, reply


def test_llama_server_keeps_the_prompt_out_of_the_journal_and_var_log_by_default(provisioned):
    env = provisioned.lab.run(spec(LLAMA_HOST), "cat /etc/llama-server/tiny.env")[1]
    assert " -lv 4 " in f" {env.split('=', 1)[1].strip()} ", env
    m = marker()
    send_llama(m)
    assert found(provisioned, LLAMA_HOST, m) == (0, [])


def test_vllm_request_logger_is_off_by_default_in_the_release_s_own_parser(provisioned):
    assert vllm_logs_requests(provisioned) is False
    if vllm_running(provisioned):  # a GPU host: the request itself
        m = marker()
        send_vllm(m)
        assert found(provisioned, VLLM_HOST, m) == (0, [])


def test_with_request_logging_on_the_prompts_go_to_the_instance_s_prompt_directory_only(provisioned, logging_on):
    logging_on(True)
    env = provisioned.lab.run(spec(LLAMA_HOST), "cat /etc/llama-server/tiny.env")[1]
    args = f" {env.split('=', 1)[1].strip()} "
    assert " -lv 4 " in args and " --log-prompts-dir /var/log/llama-server/tiny " in args, env
    m = marker()
    send_llama(m)  # retries while the restarted server loads (503)
    lines, files = found(provisioned, LLAMA_HOST, m)
    assert lines == 0, "the prompt reached the journal"
    assert len(files) == 1 and files[0].startswith("/var/log/llama-server/tiny/") and files[0].endswith(".txt"), \
        files
    host = testinfra.get_host(provisioned.lab.testinfra_url(spec(LLAMA_HOST)))
    d, f = host.file("/var/log/llama-server/tiny"), host.file(files[0])
    assert (d.user, d.mode) == ("llm", 0o700) and f.user == "llm", (d.user, oct(d.mode), f.user)
    assert f"Repeat after me: {m}" in f.content_string  # the prompt as sent
    assert vllm_logs_requests(provisioned) is True
    if vllm_running(provisioned):
        m = marker()
        send_vllm(m)
        assert found(provisioned, VLLM_HOST, m)[0] > 0
    logging_on(False)  # and off again: a new marker stays out
    m = marker()
    send_llama(m)
    assert found(provisioned, LLAMA_HOST, m) == (0, [])
    assert vllm_logs_requests(provisioned) is False
