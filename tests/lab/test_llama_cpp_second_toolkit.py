"""The full tier's llama.cpp build with the second lab toolkit (tests/tiers.toml suite second-toolkit).

CI's tier builds llama.cpp on lab-trixie (CUDA 12.4) only. Here the provisioned lab-bookworm gets the same tiny
llama-server instance (lab/data.py SECOND_TOOLKIT_ENV), which builds the pinned tree with CUDA 11.8 and g++-11 beside
its vLLM instance on the same GPU; a second deploy changes nothing. Then the checks CI's tier runs on lab-trixie's
build run on lab-bookworm's: tests/lab/test_llama_cpp.py's build and serving checks, the unit's exposure,
`v100kit plan`, `v100kit bench` and `v100kit verify` (the same test functions, imported: here `target` is
lab-bookworm, and the plan, bench and verify checks include it). At the end lab-bookworm is deployed with CI's
settings again (the instance removed; its build and model stay, as the role keeps them).
"""

from __future__ import annotations

import pytest

from lab.data import SECOND_TOOLKIT_ENV, SECOND_TOOLKIT_HOST
from lab.harness import spec
from lab.provision import FRESH_ONLY, LOGS, REUSED, DeployRun, deploy
from roles.llama_cpp.versions import DEFAULT_SOURCE
from tests.lab.conftest import make_target
from tests.lab.test_bench import test_bench_flags_cpu_served_instances_with_exit_1_and_still_times_them  # noqa: F401
from tests.lab.test_llama_cpp import (  # noqa: F401  (collected here: the same checks, on lab-bookworm)
    test_api_key_never_visible,
    test_cuda_backend_has_exactly_the_configured_architectures,
    test_kv_cache_size_matches_the_planner,
    test_runs_as_the_service_user_with_hardening,
    test_serves_from_cpu_without_gpu_and_says_so,
    test_service_answers_health_and_completions,
    test_without_a_gpu_the_gpu_check_is_skipped_and_says_so,
)
from tests.lab.test_plan import test_plan_command_reports_every_instance_and_changes_nothing  # noqa: F401
from tests.lab.test_units import test_unit_exposure_at_most_4 as unit_exposure
from tests.lab.test_verify import (  # noqa: F401
    test_verify_passes_on_the_lab_hosts_skips_gpu_checks_and_changes_nothing,
)

pytestmark = pytest.mark.disruptive  # changes a provisioned host's settings (make lab leaves them as provisioned)

LABEL = "deploy-second-toolkit"


@pytest.fixture(scope="module", autouse=True)
def second_toolkit(provisioned) -> tuple[DeployRun, DeployRun]:
    """lab-bookworm deployed with the tiny llama-server instance, then deployed again. SECOND_TOOLKIT_ENV stays
    set for every check of this module (lab/data.py host_data reads it, in this process and in pyinfra's); after
    them it is removed and lab-bookworm is deployed with CI's settings again."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECOND_TOOLKIT_ENV, "1")
        first = deploy(LABEL, ["--limit", SECOND_TOOLKIT_HOST])
        second = deploy(f"{LABEL}-2", ["--limit", SECOND_TOOLKIT_HOST]) if first.rc == 0 else first
        yield first, second
    back = deploy(f"{LABEL}-back", ["--limit", SECOND_TOOLKIT_HOST])
    assert back.rc == 0, f"{SECOND_TOOLKIT_HOST} not deployed back to CI's settings: build/lab-logs/{LABEL}-back.log"


@pytest.fixture
def target(second_toolkit, provisioned):
    first, _ = second_toolkit
    if first.rc != 0:
        pytest.fail(f"deploy of {SECOND_TOOLKIT_HOST} with llama.cpp failed (rc {first.rc}); log: "
                    f"build/lab-logs/{LABEL}.log\n{first.stderr[-4000:]}")
    return make_target(spec(SECOND_TOOLKIT_HOST), provisioned)


@pytest.fixture
def first_deploy_log():
    return LOGS / f"{LABEL}.log"


def test_builds_with_the_second_toolkit_and_a_second_deploy_changes_nothing(second_toolkit, target):
    first, second = second_toolkit
    assert target.llama.toolkit.version == "11.8" and target.llama.toolkit.host_compiler == "g++-11"
    assert "cuda11.8" in target.llama.prefix
    assert second.rc == 0 and second.changed == {}, second.changed_ops
    if REUSED:  # the role keeps builds: a reused host may have this one from an earlier run
        pytest.skip(FRESH_ONLY)
    # the build operations are named after their prefix ("llama.cpp | build tools" installs the compilers)
    builds = [op for op in first.changed_ops.get(SECOND_TOOLKIT_HOST, [])
              if op.startswith(f"llama.cpp | build {DEFAULT_SOURCE.ref}-")]
    assert builds == [f"llama.cpp | build {target.llama.prefix.rsplit('/', 1)[1]}"], first.changed_ops


def test_llama_unit_exposure_at_most_4(target, provisioned):
    unit_exposure(provisioned, "llama-server@tiny.service", SECOND_TOOLKIT_HOST)
