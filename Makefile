# The README's commands. `make demo` and `make test` each install what they need first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TEST_KAFKA_PORT ?= 29092
TEST_CLUSTER_PORT ?= 24092
PYTEST_ARGS ?=

.PHONY: install test-deps demo test test-cluster test-gpu soak images test-containers test-k8s k8s-start k8s-stop lint unit integration kafka-start kafka-stop test-kafka clean

$(BIN)/framebus: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "framebus needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/framebus

## What the suite needs beyond Python: Java and Maven (Kafka), GStreamer's RTSP server (Debian
## packages, installed when root, else the exact command is printed), helm and versitygw (an
## S3-compatible server for the clips tests), both built from Go.
test-deps:
	bash scripts/install-test-deps.sh

## The main job: local Kafka, topics, a generated video and model, both services, detections.
demo: install
	$(BIN)/framebus demo

## The whole suite: lint, types, unit tests, then integration tests on a real local Kafka.
## Nothing is skipped: a test that cannot run its real part fails with the reason. The cluster
## tests (about 12 minutes: a leader's and, ten times, the inferencer's coordinator's death) start
## a three-broker cluster of their own on TEST_CLUSTER_PORT..+5.
## The `gpu` tests are deselected (and listed at the end as not run): `make test-gpu` runs them.
## So are the `containers` tests: `make test-containers` builds the images and runs them.
test: install test-deps lint test-kafka
	FRAMEBUS_TEST_KAFKA_PORT=$(TEST_KAFKA_PORT) FRAMEBUS_TEST_CLUSTER_PORT=$(TEST_CLUSTER_PORT) \
		$(BIN)/pytest -m "not soak and not gpu and not containers and not k8s" $(PYTEST_ARGS)

## The images compose.yaml and the chart run, built here from Debian's packages and the package
## registries, no container registry (podman, runc and mmdebstrap installed when root):
## framebus/base, kafka, rtsp-camera, decoder and the GPU inferencer. IMAGES_ARGS=--no-gpu skips
## the GPU image (about 4 GB of NVIDIA wheels).
IMAGES_ARGS ?=
images: install
	bash scripts/build-images.sh $(IMAGES_ARGS)

## compose.yaml's CPU profile run for real in podman on those images (tests/containers, about
## 4 minutes; building the images from nothing adds about 3), and the GPU image's provider
## libraries resolved inside it.
test-containers: install images
	$(BIN)/pytest -m containers -rA tests/containers $(PYTEST_ARGS)

## The Helm chart installed on a one-node Kubernetes run here (tests/k8s): scripts/local-k8s.sh
## builds the cluster's binaries once from their Go modules (k8s.io/kubernetes, KEDA, Prometheus;
## cached under .cache/), starts it, and loads the images; the cluster is left running
## (make k8s-stop). Needs root.
test-k8s: install test-deps images k8s-start
	$(BIN)/pytest -m k8s -rA tests/k8s $(PYTEST_ARGS)

k8s-start:
	bash scripts/local-k8s.sh start
	bash scripts/local-k8s.sh images

k8s-stop:
	bash scripts/local-k8s.sh stop

## The `gpu` tests (tests/gpu), on a machine with an NVIDIA GPU: onnxruntime-gpu replaces
## onnxruntime, with tensorrt-cu12-libs on LD_LIBRARY_PATH and the `gpu` extra (nvidia-ml-py).
## Without them they fail, naming what is missing.
test-gpu: install
	$(BIN)/pytest -m gpu -rA $(PYTEST_ARGS)

## Only the three-broker cluster tests (part of `make test`): a partition leader SIGKILLed
## mid-stream, and the exactly-once inferencer's coordinator SIGKILLed and not restarted (10 runs,
## FRAMEBUS_COORDINATOR_RUNS), on a cluster the tests start and wipe (brokers on
## TEST_CLUSTER_PORT..+2, controllers on the next three).
test-cluster: install test-deps
	FRAMEBUS_TEST_CLUSTER_PORT=$(TEST_CLUSTER_PORT) $(BIN)/pytest -m "cluster and not soak" -rA $(PYTEST_ARGS)

## The soaks, run by CI after `make test`: 10 minutes of 8 cameras at 5 fps (RSS and accounting),
## then the chaos soak (about 7 minutes: every service, three live cameras, a seeded schedule of
## faults on a three-broker cluster of its own on TEST_CLUSTER_PORT..+5; FRAMEBUS_CHAOS_SEED,
## FRAMEBUS_CHAOS_S).
soak: install test-deps test-kafka
	FRAMEBUS_TEST_KAFKA_PORT=$(TEST_KAFKA_PORT) FRAMEBUS_TEST_CLUSTER_PORT=$(TEST_CLUSTER_PORT) \
		$(BIN)/pytest -m soak -rA $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

unit: install
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test-kafka: install test-deps
	FRAMEBUS_KAFKA_PORT=$(TEST_KAFKA_PORT) $(BIN)/framebus kafka start

kafka-start: install
	$(BIN)/framebus kafka start

kafka-stop: install
	$(BIN)/framebus kafka stop

clean:
	rm -rf $(VENV) demo-output bench-output .pytest_cache .mypy_cache .ruff_cache
