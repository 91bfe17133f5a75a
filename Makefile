# tracekit: the two commands of the quick start are `make demo` and `make test`.
PYTHON ?= python3
PIP := $(PYTHON) -m pip install -q --root-user-action=ignore --disable-pip-version-check
DEMO ?= fixtures/captures/slow_start_overrun
TEST_TOOLS := tshark:tshark tcptrace:tcptrace tcpdump:tcpdump chromium:chromium nft:nftables ethtool:ethtool iperf3:iperf3 editcap:wireshark-common mergecap:wireshark-common capinfos:wireshark-common
LAB_TOOLS := tcpdump:tcpdump nft:nftables ethtool:ethtool iperf3:iperf3 tcptrace:tcptrace

.PHONY: install install-test demo test lint typecheck fixtures bench fuzz

# A distribution named `tracekit` (an earlier install of this project under that name, or the
# unrelated project of that name on PyPI) provides the same import package: it goes first.
UNINSTALL_OLD := $(PYTHON) -m pip uninstall -y -q --root-user-action=ignore tracekit 2>/dev/null || true

install:
	$(UNINSTALL_OLD)
	$(PIP) -e .

install-test:
	$(UNINSTALL_OLD)
	$(PIP) -e '.[test]'
	.ci/system-deps $(TEST_TOOLS)

# The main job on a bundled pair of captures: findings on the terminal, the report as a file.
demo: install
	tracekit analyze $(DEMO)/sender.pcap --receiver $(DEMO)/receiver.pcap
	tracekit report $(DEMO)/sender.pcap --receiver $(DEMO)/receiver.pcap -o demo-report.html
	@echo "open demo-report.html in a browser (it works offline)"

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

# mypy reads the package as it installs: cli/ is tracekit.cli (pyproject.toml's package-dir),
# which mypy cannot follow, so it checks a tree of links laid out as the install is.
MYPY_TREE := build/mypy
typecheck:
	rm -rf $(MYPY_TREE) && mkdir -p $(MYPY_TREE)/tracekit
	ln -s $(CURDIR)/tracekit/* $(MYPY_TREE)/tracekit/
	ln -s $(CURDIR)/cli $(MYPY_TREE)/tracekit/cli
	cd $(MYPY_TREE) && $(PYTHON) -m mypy --config-file $(CURDIR)/pyproject.toml -p tracekit

test: install-test lint typecheck
	$(PYTHON) -m pytest -n 2 -q

fixtures: install
	.ci/system-deps $(LAB_TOOLS)
	$(PYTHON) -m fixtures.lab all

# Speed against the peers (not tests): needs root to record the 5 M-packet capture once.
bench: install-test
	$(PYTHON) bench/ingest.py --reuse
	$(PYTHON) bench/report.py
	$(PYTHON) bench/batch.py
	$(PYTHON) bench/connections.py
	$(PYTHON) bench/cores.py --reuse
	$(PYTHON) bench/report_load.py --write current --measure current

# Coverage-guided fuzzing of the whole pipeline, kernels bounds-checked (FUZZ_SECONDS, default
# an hour). Crashes land in bench/data/fuzz/ as crash-<sha1>; the corpus grows there too. The
# harness's one process grows by tens of KB per input (numba's bounds-checked dispatch and the
# coverage instrumentation; the installed kernels stay flat), so its RSS limit is set for hours.
FUZZ_SECONDS ?= 3600
fuzz: install-test
	mkdir -p bench/data/fuzz/corpus
	$(PYTHON) tests/fuzz_pipeline.py -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=16384 \
		-timeout=90 -artifact_prefix=bench/data/fuzz/ bench/data/fuzz/corpus
