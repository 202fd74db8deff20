"""Set up the llama-server@bench instance of tools/gpu/bench/go.sh the way the llama_cpp role would, on a machine
without systemd: a localhost inventory (pyinfra's @local), the API key file, the service user, the model at the
planned path, and the role's rendered EnvironmentFile and key file (roles/llama_cpp/decide.py environment, ops.py
instance_config's format), from the same preflight the deploy runs. Prints the plan.
usage: [DRY=1] [CONTEXT=N] [PARALLEL=N] [ALLOW_GPU_IN_USE=0] [PLAN_JSON=PATH] instance.py MODEL.gguf STATE_DIR
(DRY: print the plan, change nothing; CONTEXT / PARALLEL: the instance's context and parallel settings; unset: the
toolkit's defaults; ALLOW_GPU_IN_USE=0: plan around the memory other processes hold (tools/gpu/freemem/go.sh), not
the bench's allow_gpu_in_use; PLAN_JSON: also write v100kit plan's summary of the host there, as JSON)"""

import hashlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

model, state = Path(sys.argv[1]), Path(sys.argv[2])
state.mkdir(parents=True, exist_ok=True)
key = state / "api.key"
if not key.is_file():
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
h = hashlib.sha256()
with model.open("rb") as f:
    while chunk := f.read(1 << 24):
        h.update(chunk)
(state / "inventory.py").write_text(f'''"""This machine, as tools/gpu/bench/go.sh benches it (pyinfra's @local connector)."""
gpu = [("@local", {{
    "llama_cpp_instances": {{"bench": {{
        "model_source": "{model}", "model_sha256": "{h.hexdigest()}",
        "port": 8080, "api_key_file": "{key}",
        # the systemctl stand-in starts llama-server outside any systemd unit, so the bench's preflight cannot tell
        # it from another user's process (roles/engines.py OWN_UNIT reads the unit from the process's cgroup)
        "allow_gpu_in_use": {os.environ.get("ALLOW_GPU_IN_USE", "1") != "0"},{"".join(f' "{k.lower()}": {int(os.environ[k])},'
                                                 for k in ("CONTEXT", "PARALLEL") if os.environ.get(k))}
    }}}},
}})]
''')

from roles.llama_cpp.decide import CONFIG_DIR, environment  # noqa: E402
from v100kit.hosts import HostFailure, for_each_host  # noqa: E402
from v100kit.plan import summarize, table  # noqa: E402

plans = for_each_host(str(state / "inventory.py"), None, lambda host, plan: (summarize(host, plan), plan))
result = plans["@local"]
if isinstance(result, HostFailure):
    sys.exit(f"the preflight refused this machine ({result.error}):\n{result.cause}")
summary, plan = result
print(table({"@local": summary}))
if os.environ.get("PLAN_JSON"):
    import json
    Path(os.environ["PLAN_JSON"]).write_text(json.dumps(summary, indent=2, default=str))
if os.environ.get("DRY"):  # a check of the inventory and the preflight alone, changing nothing
    sys.exit(0)
inst = plan.llama_cpp.instances[0]
user, home = plan.settings.base_service_user, plan.settings.base_service_home
if subprocess.run(["id", user], capture_output=True).returncode != 0:
    subprocess.run(["useradd", "--system", "--home-dir", home, "--shell", "/usr/sbin/nologin", user], check=True)
Path(inst.model_path).parent.mkdir(parents=True, exist_ok=True)
if not Path(inst.model_path).exists():
    os.symlink(model, inst.model_path)
Path(CONFIG_DIR).mkdir(parents=True, exist_ok=True)
env = environment(inst, plan.llama_cpp.source.flash_attn_style)
Path(f"{CONFIG_DIR}/{inst.name}.env").write_text(env)
key_env = Path(f"{CONFIG_DIR}/{inst.name}.key.env")
key_env.write_text(f"LLAMA_API_KEY={inst.api_key}\n")
key_env.chmod(0o600)
print(f"rendered {CONFIG_DIR}/{inst.name}.env: {env.strip()}")
