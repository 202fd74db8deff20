# make lab        provision the bundled lab hosts (Debian 12 + 13) and show the verification
# make test       every test: settings, plan-level and lab (provisions fresh lab hosts, about 15 minutes)
# make test-fast  settings and plan-level tests only (seconds, no lab)
.PHONY: setup lab test test-fast clean-lab

setup:
	./tools/setup.sh

lab: setup
	.venv/bin/python -m pytest tests/lab -v -rs

test: setup
	.venv/bin/python -m pytest -rs

test-fast: setup
	.venv/bin/python -m pytest -m "not lab" -q

clean-lab:
	.venv/bin/python -m lab destroy
