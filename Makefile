# make lab        provision the bundled lab hosts (Debian 12 + 13) and show the verification (tens of minutes)
# make test       CI's tier: settings, plan-level and lab (fresh lab hosts); tests/tiers.toml's suites excluded
# make test-all   the full tier: tests/tiers.toml's suites (second toolkit, Ray cluster, offline, field states, ...)
# make test-fast  settings and plan-level tests only (about 6 minutes on 2 cores, no lab, no root)
# make mutation   mutation testing of the decision modules (mutmut; an hour or more, not part of make test)
.PHONY: setup setup-lab lab test test-all test-fast mutation clean-lab

setup:
	./tools/setup.sh

setup-lab:
	./tools/setup.sh --lab

lab: setup-lab
	@echo "make lab: the first deploy of both hosts runs for 30 to 45 minutes from an empty lab cache (about 7 warm) before its tests print; follow it with"
	@echo "  tail -f build/lab-logs/deploy-1.log"
	.venv/bin/python -m pytest tests/lab -v -rs -m "not disruptive and not cluster and not full" --durations=12
	.venv/bin/v100kit verify inventory/lab.py -- -v -rs  # the host checks a user runs on real boxes, on the lab hosts

test: setup-lab
	tools/test_ci_tier.sh  # the fast tests beside the lab tests (tests/tiers.toml: "not full")

test-all: setup-lab
	.venv/bin/python -m pytest -rs --durations=20 -m full

test-fast: setup
	.venv/bin/python -m pytest -m "not lab and not full" -q

mutation: setup
	./tools/mutation.sh

clean-lab:
	.venv/bin/v100kit lab destroy
