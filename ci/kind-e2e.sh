#!/usr/bin/env bash
# The conformance features on a kind cluster, in one command, as CI runs them:
# the harness builds the operator image, creates a kind cluster from kind-config.yaml,
# loads the image, runs every scenario kind can run, and deletes the cluster at the end
# (also after a failure or ctrl-c; a failed run's cluster logs go to
# target/opconform/kind-logs first).
#
# Needs docker (with a running engine), kind and kubectl on PATH. Arguments go to the
# runner, e.g. `ci/kind-e2e.sh --tags @lease`. Set OPCONFORM_KIND_CLUSTER=<name> to use
# an existing kind cluster (never deleted), OPCONFORM_IMAGE=<ref> to skip the build.
set -euo pipefail
cd "$(dirname "$0")/.."
export OPCONFORM_JUNIT="${OPCONFORM_JUNIT:-target/opconform/kind/junit.xml}"
OPCONFORM_PROVIDER=kind cargo test --test e2e -- "$@"
