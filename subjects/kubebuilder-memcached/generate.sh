#!/usr/bin/env bash
# Regenerates project/ from scratch with kubebuilder v4, as the kubebuilder tutorial's
# memcached operator is made (see README.md beside this script). Needs only Go and the Go
# module proxy: kubebuilder, controller-gen and kustomize are built with `go install`.
#
#   subjects/kubebuilder-memcached/generate.sh [OUT_DIR]
#
# OUT_DIR (the argument, else the OUT_DIR environment variable, else project/ beside this
# script) is replaced by the result. KUBEBUILDER_VERSION overrides the pinned kubebuilder.
# Progress goes to stderr.
set -euo pipefail

KUBEBUILDER_VERSION=${KUBEBUILDER_VERSION:-v4.16.0}
# The manager's image: the only change made to what kubebuilder scaffolds.
IMAGE=opconform/kubebuilder-memcached:dev

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-${OUT_DIR:-$here/project}}
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
export GOTOOLCHAIN=local

log() { echo "generate.sh: $*" >&2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# kubebuilder names the project after its directory (namespace memcached-operator-system,
# names prefixed memcached-operator-): scaffold where the tutorial does, move it after.
work="$tmp/memcached-operator"
mkdir -p "$work" "$tmp/bin"

log "building kubebuilder $KUBEBUILDER_VERSION (go install, into $tmp/bin)"
GOBIN="$tmp/bin" go install "sigs.k8s.io/kubebuilder/v4@$KUBEBUILDER_VERSION"
kubebuilder="$tmp/bin/kubebuilder"
"$kubebuilder" version >&2

cd "$work"
log "kubebuilder init"
"$kubebuilder" init --domain example.org --repo example.org/memcached-operator >&2

log "kubebuilder create api (deploy-image/v1-alpha)"
"$kubebuilder" create api --group cache --version v1alpha1 --kind Memcached \
  --plugins="deploy-image/v1-alpha" \
  --image=memcached:1.6-alpine \
  --image-container-command="memcached,--memory-limit=64,-o,modern,-v" \
  --image-container-port="11211" \
  --run-as-user="1001" \
  --make=false >&2

log "kubebuilder create webhook (defaulting, programmatic validation)"
"$kubebuilder" create webhook --group cache --version v1alpha1 --kind Memcached \
  --defaulting --programmatic-validation >&2

log "make manifests generate fmt"
# fmt: the deploy-image scaffold leaves cmd/main.go unaligned; `make build` and `make run`
# run the same `go fmt ./...` before anything else.
make manifests generate fmt >&2

log "setting the manager's image to $IMAGE (what \`make deploy IMG=...\` does)"
make kustomize >&2
(cd config/manager && ../../bin/kustomize edit set image "controller=$IMAGE")

want=$(go list -m -f '{{.GoVersion}}')
have=$(go env GOVERSION)
have=${have#go}
if [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | tail -1)" != "$have" ]; then
  log "NOTE: go.mod asks for go $want, newer than the local go $have (GOTOOLCHAIN=local will refuse it)"
fi

log "removing bin/ and whatever else the project's .gitignore ignores"
rm -rf bin
git init -q .
git ls-files -z --others --ignored --exclude-standard --directory | xargs -0 -r rm -rf --
rm -rf .git

log "replacing $out"
rm -rf "$out"
mv "$work" "$out"
log "done: $(find "$out" -type f | wc -l) files (kubebuilder $KUBEBUILDER_VERSION, go $want)"
