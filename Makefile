# The two commands: `make demo` (a real RL run of the whole pipeline) and `make test`.
# Everything they need is installed by scripts/ and cached under ~/.cache/m1flow.
SHELL := /bin/bash
VENV = $(shell bash scripts/env.sh)
PY = PYTHONPATH=$(CURDIR) $(VENV)/bin/python

.PHONY: setup docker k8s s3 proto demo test test-fast up cluster cluster-down clean

# The system packages, the venv, Kafka's jars and the generated protobuf code, set up side by side.
setup:
	@bash scripts/setup.sh

# A Docker engine and Compose v2 (installed and started when none answers) and the base images
# (local stand-ins where no registry answers), for the cluster and the Docker sandbox tests. A
# machine that cannot run an engine goes on without one: those tests then skip with the reason.
docker:
	@bash scripts/docker_engine.sh || [ $$? -eq 3 ]
	@bash scripts/docker_images.sh >/dev/null || [ $$? -eq 3 ]

# The Kubernetes test tier's binaries (etcd, kube-apiserver, controller-manager, scheduler, kubectl,
# kwok, helm) built from Go modules and the CRDs, cached under ~/.cache/m1flow/k8s: about 15 to 20
# min the first time on 2 cores, seconds after (docs/deploy.md). tests/k8s starts the cluster. A
# machine without Go goes on without it (exit 3): those tests then skip with the reason.
k8s:
	@bash scripts/k8s_local.sh build crds || [ $$? -eq 3 ]

# The S3-compatible server of the object-store checkpoint tests and bench (s3s-fs from crates.io,
# built once and cached under ~/.cache/m1flow/s3). Without cargo those tests skip, saying so; a
# failed build does not stop the other tests: the tests that need it fail with the build log's tail.
s3:
	@bash scripts/s3_server.sh build >/dev/null || true

proto:
	$(PY) -m m1flow.protogen

demo: setup
	$(PY) -m ops demo --minutes $${MINUTES:-8}

# setup, docker and s3, then pytest while the k8s tier builds in the background (scripts/test.sh).
# The sandbox's run image (scripts/sandbox_image.sh) is built on the base scripts/docker_images.sh chose.
test:
	@PYTEST_ARGS="$(PYTEST_ARGS)" bash scripts/test.sh

# The unit tier alone (no broker, jail, engine or cluster; README "Tests"), for the inner loop.
test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m unit -n 2 --dist loadscope $(PYTEST_ARGS)

up: setup
	$(PY) -m ops up

# The mini-cluster in containers (docker-compose.yml): `m1flow cluster up|status|down`.
cluster: setup docker
	$(PY) -m ops cluster up

cluster-down:
	$(PY) -m ops cluster down --volumes

clean:
	rm -rf run m1flow/v1
