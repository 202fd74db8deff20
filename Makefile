# make lab        provision the bundled lab hosts (Debian 12 + 13) and show the verification (tens of minutes)
# make test       every test: settings, plan-level and lab (fresh lab hosts, tens of minutes on 2 cores)
# make test-fast  settings and plan-level tests only (about 3.5 minutes on 2 cores, no lab, no root)
# make mutation   mutation testing of the decision modules (mutmut; an hour or more, not part of make test)
.PHONY: setup setup-lab lab test test-fast mutation clean-lab

setup:
	./tools/setup.sh

setup-lab:
	./tools/setup.sh --lab

lab: setup-lab
	.venv/bin/python -m pytest tests/lab -v -rs -m "not disruptive and not cluster" --durations=12

test: setup-lab
	.venv/bin/python -m pytest -rs --durations=20

test-fast: setup
	.venv/bin/python -m pytest -m "not lab" -q

mutation: setup
	./tools/mutation.sh

clean-lab:
	.venv/bin/v100kit lab destroy
