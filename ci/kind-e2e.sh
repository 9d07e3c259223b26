#!/usr/bin/env bash
# The conformance features on a real kind cluster, in one command, as CI runs them:
#
# 1. ci/kind/docker.sh up: a Docker engine (installed from Debian, made able to run
#    privileged containers, started) unless one is there;
# 2. ci/kind/build.sh: kind and kubectl, the node image, the operator image and its base
#    image, built here without pulling anything (cached: a second run builds nothing);
# 3. OPCONFORM_PROVIDER=kind cargo test --workspace --test e2e: the harness creates a kind cluster
#    from kind-config.yaml with that node image, loads the operator image, runs every
#    scenario kind can run, and deletes the cluster at the end (a failed run's cluster
#    logs go to target/opconform/kind-logs first);
# 4. ci/kind/docker.sh down, also after a failure or an interrupt: stops dockerd if step 1
#    started it.
#
# Arguments go to the runner, e.g. `ci/kind-e2e.sh --tags @lease`. With OPCONFORM_OPERATOR
# naming a profile, its operator runs its own image (see below), not the bundled one's.
#
# `ci/kind-e2e.sh conformance [PROFILE…] [--tags EXPR]` runs, in step 3's place, the
# leadership conformance table on kind: `opconform conformance --provider kind` with
# those arguments (built with `cargo build --workspace --bins`). It creates one kind
# cluster for all the profiles and deletes it at the end; each profile runs the image its
# manifests name, from the Docker engine or built from its binary on the base image
# (OPCONFORM_KIND_BASE_IMAGE): OPCONFORM_IMAGE, the bundled operator's, is not set.
#
# With OPCONFORM_KIND_BUILD=0, steps 1 and 2 are skipped and docker, kind and kubectl come
# from PATH: the harness builds the operator image from operator/Dockerfile (unless
# OPCONFORM_IMAGE names one) and kind uses its own node image (unless
# OPCONFORM_KIND_NODE_IMAGE names one). OPCONFORM_KIND_CLUSTER=<name> uses an existing
# kind cluster (never deleted).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=e2e
if [ "${1-}" = conformance ]; then
  mode=conformance
  shift
else
  export OPCONFORM_JUNIT="${OPCONFORM_JUNIT:-target/opconform/kind/junit.xml}"
fi

# Step 3.
run_on_kind() {
  if [ "$mode" = conformance ]; then
    # With the workspace's features, as the tests build it.
    cargo build -q --workspace --bins
    "${CARGO_TARGET_DIR:-target}/debug/opconform" conformance --provider kind "$@"
  else
    OPCONFORM_PROVIDER=kind cargo test --workspace --test e2e -- "$@"
  fi
}

if [ "${OPCONFORM_KIND_BUILD:-1}" = 0 ]; then
  run_on_kind "$@"
  exit
fi

clusters_before=""
# A node killed while its runc was creating a container can leave that container's
# cgroup frozen (cgroup v1: runc freezes it while it sets the device rules), and a frozen
# process never exits: Docker then cannot remove the node ("did not receive an exit
# event"). Thawing the node's frozen cgroups lets it go.
thaw_nodes() {
  local node id state
  for node in $(kind get nodes --name "$1" 2>/dev/null); do
    id=$(docker inspect --format '{{.Id}}' "$node" 2>/dev/null) || continue
    for state in $(find "/sys/fs/cgroup/freezer/docker/$id" -name freezer.state 2>/dev/null); do
      if [ "$(cat "$state")" != THAWED ]; then
        echo THAWED >"$state" 2>/dev/null || true
      fi
    done
  done
}
finish() {
  local status=$?
  # Clusters this run created and the harness did not delete (it was killed): theirs
  # are the nodes dockerd would otherwise keep, stopped.
  if command -v kind >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    local cluster
    for cluster in $(kind get clusters 2>/dev/null); do
      case " $clusters_before " in *" $cluster "*) continue ;; esac
      echo "kind e2e: deleting kind cluster $cluster, left by the run" >&2
      thaw_nodes "$cluster"
      kind delete cluster --name "$cluster" >&2 || true
    done
  fi
  ci/kind/docker.sh down || status=1
  exit $status
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ci/kind/docker.sh up
built=$(ci/kind/build.sh)
eval "$built"
export PATH="$KIND_TOOLS_PATH:$PATH" OPCONFORM_KIND_NODE_IMAGE OPCONFORM_KIND_BASE_IMAGE
# OPCONFORM_IMAGE is the bundled operator's image: it would replace any other's.
if [ "$mode" = conformance ] || [ -n "${OPCONFORM_OPERATOR:-}" ]; then
  unset OPCONFORM_IMAGE
  echo "kind e2e: node image $OPCONFORM_KIND_NODE_IMAGE, base image $OPCONFORM_KIND_BASE_IMAGE, $(kind version)" >&2
else
  export OPCONFORM_IMAGE
  echo "kind e2e: node image $OPCONFORM_KIND_NODE_IMAGE, operator image $OPCONFORM_IMAGE, $(kind version)" >&2
fi
clusters_before=$(kind get clusters 2>/dev/null | tr '\n' ' ')
run_on_kind "$@"
