# Sluice: every target creates the environment it needs, idempotently.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
GEN_STAMP := libs/sluice/v1/.generated
PROTOS := $(wildcard protos/sluice/v1/*.proto)
PYTEST_ARGS ?=
DURATIONS ?= --durations=25
BENCH ?=

.PHONY: env demo test test-fast crash-test fault-test fuzz bench proto clean standalone postgres chromium promtool kafka-fetch kafka-up kafka-down kafka-cluster-up kafka-cluster-down compose-schema spark-up spark-down demo-cluster

env: $(STAMP) $(GEN_STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip wheel setuptools
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

$(GEN_STAMP): $(PROTOS) $(STAMP)
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=libs --pyi_out=libs --grpc_python_out=libs $(PROTOS)
	touch libs/sluice/v1/__init__.py
	touch $@

proto: $(GEN_STAMP)

demo: env
	$(PY) -m sluice_examples.clickstream.demo

standalone: env
	$(PY) -m sluice_services.cli standalone

# PostgreSQL server binaries from Debian's packages; the tests start throwaway servers on free ports.
postgres:
	sh deploy/postgres/install.sh

# Debian's chromium and chromedriver for the web console's browser tests (tests/integration/test_console_browser.py).
chromium:
	sh deploy/chromium/install.sh

# Debian's promtool, to check deploy/prometheus's alert rules and the Grafana dashboard's queries.
promtool:
	sh deploy/prometheus/install-promtool.sh

test: env postgres chromium promtool kafka-fetch compose-schema
	$(PY) -m pytest $(DURATIONS) $(PYTEST_ARGS)

# The Compose file schema (from the docker-compose release on PyPI), to validate docker-compose.yml without Docker.
compose-schema: env
	PYTHON=$(PY) bash deploy/compose/fetch-schema.sh

# The Kafka broker's jars from Maven Central into deploy/kafka/.cache/libs (skips when up to date).
kafka-fetch:
	bash deploy/kafka/fetch.sh

# A local single-node KRaft broker on 127.0.0.1 for development; its address: deploy/kafka/.cache/broker.address.
kafka-up: kafka-fetch
	bash deploy/kafka/broker.sh up

kafka-down:
	bash deploy/kafka/broker.sh down

# A local 3-node KRaft cluster (broker-fault work); bootstrap list in deploy/kafka/.cache/cluster.address,
# a bus URL with 3 replicas in .cache/cluster.url; `deploy/kafka/cluster.sh kill N|restart N|status`.
kafka-cluster-up: kafka-fetch
	bash deploy/kafka/cluster.sh up

kafka-cluster-down:
	bash deploy/kafka/cluster.sh down

# A Spark standalone cluster from pyspark's own jars: a master and two workers on 127.0.0.1, free ports;
# the master URL (for --spark-master) in deploy/spark/.cache/master.url, pids beside it.
spark-up: env
	bash deploy/spark/cluster.sh up

spark-down:
	bash deploy/spark/cluster.sh down

# The clickstream example with every service its own process over Kafka and PostgreSQL, programs on
# a standalone Spark cluster (one master, two workers); prints the tables of `make demo`.
demo-cluster: env postgres kafka-fetch
	$(PY) -m sluice_examples.clickstream.demo_cluster

test-fast: env postgres compose-schema
	$(PY) -m pytest -m "not slow and not bench" $(PYTEST_ARGS)

# The crash sweep (tests/crash): >= 500 seeded crash points on SQLite and on PostgreSQL, judged
# against the crash-free oracle; prints the counts. Replay: SEED=, RUN_SEED= (one run), POINT= (B@N).
CRASH_ARGS ?=
crash-test: env postgres
	$(PY) -m tests.crash.sweep $(if $(BACKEND),--backend $(BACKEND)) $(if $(MATCHER),--matcher $(MATCHER)) \
		$(if $(SEED),--seed $(SEED)) $(if $(RUN_SEED),--run-seed $(RUN_SEED)) $(foreach p,$(POINT),--point $(p)) \
		$(if $(POINTS),--points $(POINTS)) $(CRASH_ARGS)

# The fault campaign (tests/faults, issue 25): the services as processes over a 3-broker Kafka cluster and
# PostgreSQL under a steady load, each fault kind twice in a seeded order; prints `fault-test: faults=N lost=0
# duplicate=0 valid_dead_lettered=0 max_recovery_s=X`. Needs root (a tmpfs). FAULT_SEED=, FAULT_ARGS= (--short, --rounds N).
FAULT_ARGS ?=
fault-test: env postgres kafka-fetch
	$(PY) -m tests.faults $(if $(FAULT_SEED),--seed $(FAULT_SEED)) $(FAULT_ARGS)

# The fuzz suite (tests/fuzz): hypothesis inputs to every gRPC method, HTTP route and bus topic of a real
# standalone; prints `fuzz: inputs=N refused=N accepted=N crashes=N crash_loops=N`. FUZZ_EXAMPLES= per target, FUZZ_SEED=.
FUZZ_EXAMPLES ?= 60
fuzz: env
	$(PY) -m tests.fuzz --examples $(FUZZ_EXAMPLES) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

bench: env
	$(PY) -m bench $(BENCH)

clean:
	rm -rf $(VENV) libs/sluice/v1 .sluice .pytest_cache
