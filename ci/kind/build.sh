#!/usr/bin/env bash
# Everything a real kind cluster needs on a machine that cannot pull images, built here
# from Debian's packages and the Go module proxy, and cached:
#
#   ci/kind/build.sh tools      kind (KIND_VERSION) and kubectl; prints their directories
#   ci/kind/build.sh node       the node image; prints its reference
#   ci/kind/build.sh operator   the operator image from this workspace's binary; prints it
#   ci/kind/build.sh base       the Debian base image of the operator image; prints it (the
#                               kind provider builds the image of any other operator on it)
#   ci/kind/build.sh            all four, printed as shell assignments:
#                               KIND_TOOLS_PATH=… OPCONFORM_KIND_NODE_IMAGE=…
#                               OPCONFORM_IMAGE=… OPCONFORM_KIND_BASE_IMAGE=…
#
# The node image (opconform/kind-node:<kubernetes version>-<hash>) is Debian bookworm
# (debootstrap) with systemd, containerd, runc and the CNI plugins, the kubelet, kubeadm
# and kubectl from ci/kubernetes/build.sh, the files of ci/kind/node/, and preloaded into
# its containerd every image kubeadm asks for (`kubeadm config images list`), each built
# here: the control-plane components, kube-proxy (on Debian with iptables), etcd
# (ETCD_VERSION under the tag kubeadm expects), CoreDNS (COREDNS_VERSION, from its Go
# module), pause (ci/kind/pause.c) — and the workload image the operator deploys,
# memcached:1.6-alpine, here Debian's memcached package under that name. Its tag is a
# hash of its inputs (versions, these scripts and files, the binaries), so a second run
# finds it (`docker image inspect`) and builds nothing.
#
# The base image (opconform/debian:bookworm-<hash>) is a minimal Debian bookworm (glibc
# 2.36): the operator image is the workspace's binary on it, and the kind provider puts on
# it the binary of an operator whose image neither OPCONFORM_IMAGE nor the Docker engine
# has (OPCONFORM_KIND_BASE_IMAGE). A binary must be static (the Go subjects are built with
# CGO_ENABLED=0) or need no newer glibc.
#
# Needs root (debootstrap, chroot), a running Docker engine (ci/kind/docker.sh up), Go,
# gcc, debootstrap (both installed from Debian when missing) and cargo. Caches under
# ${OPCONFORM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opconform}: kind-<version>/bin,
# coredns-<version>/bin, kind-node/ (root filesystems, pause). Progress on stderr; a
# failure names its step.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../kubernetes/versions.env
. "$repo/ci/kubernetes/versions.env"
cache_root=${OPCONFORM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opconform}
work=$cache_root/kind-node
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Debian packages of each root filesystem.
node_packages="systemd containerd runc containernetworking-plugins iptables nftables conntrack iproute2 ethtool kmod libseccomp2 procps util-linux mount bash ca-certificates"
proxy_packages="iptables conntrack iproute2 kmod"
memcached_packages="memcached"
# The image the operator's Memcached Deployments run (operator/src/controller.rs).
memcached_image=memcached:1.6-alpine

step=""
started=$(date +%s)
progress() { echo "kind build [$(($(date +%s) - started))s]: $*" >&2; }
loader=""
finish() {
  local status=$?
  [ -z "$loader" ] || docker rm -f "$loader" >/dev/null 2>&1 || true
  if [ $status -ne 0 ]; then echo "kind build: failed while: $step (exit $status)" >&2; fi
}
trap finish EXIT

# docker build, its output shown only when it fails (the legacy builder's deprecation
# notice is noise here: BuildKit's features are not used).
build_image() {
  local out
  if ! out=$(nice -n 19 docker build -q "$@" 2>&1); then
    printf '%s\n' "$out" >&2
    return 1
  fi
}

have_image() { docker image inspect --format '{{.Id}}' "$1" >/dev/null 2>&1; }
# Removes the other tags of `tag`'s repository (earlier builds: each node image is over
# 1 GB), unless a container still uses them.
prune_others() {
  local repository=${1%:*} other
  for other in $(docker images "$repository" --format '{{.Repository}}:{{.Tag}}'); do
    [ "$other" = "$1" ] && continue
    if docker rmi "$other" >/dev/null 2>&1; then
      progress "removed the earlier $other"
    fi
  done
}
short_hash() { sha256sum | cut -c1-12; }

# Installs from Debian the host tools the images need that this machine lacks
# (debootstrap for the root filesystems, a C compiler for pause).
host_packages() {
  local packages=()
  command -v debootstrap >/dev/null 2>&1 || packages+=(debootstrap)
  command -v gcc >/dev/null 2>&1 || packages+=(gcc libc6-dev)
  [ ${#packages[@]} -gt 0 ] || return 0
  step="installing ${packages[*]} from Debian (apt-get)"
  if [ "$(id -u)" != 0 ]; then
    echo "kind build: ${packages[*]} missing; install them (apt-get install ${packages[*]}) or run as root" >&2
    exit 1
  fi
  progress "$step"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}

tools() {
  step="checking the tools"
  command -v go >/dev/null || { echo "kind build: go is not on PATH" >&2; exit 1; }
  host_packages
  export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
  kind_bin=$cache_root/kind-$KIND_VERSION/bin
  if [ ! -x "$kind_bin/kind" ]; then
    step="building kind $KIND_VERSION from sigs.k8s.io/kind (about 2 minutes cold)"
    progress "$step"
    GOBIN=$kind_bin nice -n 19 go install -trimpath "sigs.k8s.io/kind@$KIND_VERSION"
  fi
  coredns_bin=$cache_root/coredns-$COREDNS_VERSION/bin
  if [ ! -x "$coredns_bin/coredns" ]; then
    step="building CoreDNS $COREDNS_VERSION from github.com/coredns/coredns (about 6 minutes cold)"
    progress "$step"
    GOBIN=$coredns_bin nice -n 19 go install -trimpath -ldflags=-s "github.com/coredns/coredns@$COREDNS_VERSION"
  fi
  step="building the Kubernetes binaries (ci/kubernetes/build.sh)"
  progress "$step"
  kube_bin=$(nice -n 19 "$repo/ci/kubernetes/build.sh" kubelet kubeadm kube-proxy kubectl \
    kube-apiserver kube-controller-manager kube-scheduler etcd)
  etcd_bin=$cache_root/etcd-$ETCD_VERSION/bin
}

# A Debian root filesystem with `packages`, cached under $work by package list; prints
# its directory.
rootfs() {
  local packages=$1 key dir base=$work/rootfs-$suite-minbase
  if [ ! -f "$base/.done" ]; then
    step="debootstrap --variant=minbase $suite (about 40 s)"
    progress "$step"
    rm -rf "$base"
    mkdir -p "$base"
    nice -n 19 debootstrap --variant=minbase "$suite" "$base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
      { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
    rm -rf "$base"/var/cache/apt/archives/*.deb "$base"/var/lib/apt/lists/*
    touch "$base/.done"
  fi
  [ -n "$packages" ] || { echo "$base"; return; }
  key=$(echo "$suite $packages" | short_hash)
  dir=$work/rootfs-$key
  if [ ! -f "$dir/.done" ]; then
    step="installing into a copy of $suite: $packages"
    progress "$step"
    rm -rf "$dir"
    cp -a "$base" "$dir"
    rm -f "$dir/.done"
    cat >"$dir/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
SOURCES
    # No service starts inside the chroot.
    printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
    chmod 755 "$dir/usr/sbin/policy-rc.d"
    # shellcheck disable=SC2086
    nice -n 19 chroot "$dir" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages" \
      >"$dir.log" 2>&1 || { tail -n 20 "$dir.log" >&2; exit 1; }
    chroot "$dir" apt-get clean
    rm -f "$dir/usr/sbin/policy-rc.d"
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
    touch "$dir/.done"
  fi
  echo "$dir"
}

# Imports a root filesystem as image `tag` unless it exists.
import_rootfs() {
  local dir=$1 tag=$2
  have_image "$tag" && return 0
  step="importing $dir as $tag"
  progress "$step"
  tar -C "$dir" --exclude=./.done --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' -c . | nice -n 19 docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$tag" >/dev/null
}

# The Debian base images: prints the tag of the one with `packages`.
debian_image() {
  local packages=$1 dir tag
  dir=$(rootfs "$packages")
  tag=opconform/debian:$suite-$(echo "$suite $packages" | short_hash)
  import_rootfs "$dir" "$tag"
  echo "$tag"
}

# An image holding one static binary: tag, binary, its path in the image, and whether it
# is the entrypoint.
static_image() {
  local tag=$1 binary=$2 path=$3 entrypoint=$4 ctx
  ctx=$(mktemp -d "$work/context.XXXXXX")
  install -D -m 755 "$binary" "$ctx/root$path"
  mkdir -p "$ctx/root/etc" "$ctx/root/tmp"
  chmod 1777 "$ctx/root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$ctx/root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\nnogroup:x:65534:\n' >"$ctx/root/etc/group"
  {
    echo "FROM scratch"
    echo "COPY root/ /"
    echo "ENV PATH=/usr/local/bin:/usr/bin:/bin"
    [ "$entrypoint" = yes ] && echo "ENTRYPOINT [\"$path\"]"
  } >"$ctx/Dockerfile"
  step="building $tag"
  build_image -t "$tag" "$ctx"
  rm -rf "$ctx"
}

memcached() {
  local base
  base=$(debian_image "$memcached_packages")
  if [ "$(docker image inspect --format '{{.Id}}' "$memcached_image" 2>/dev/null)" != \
    "$(docker image inspect --format '{{.Id}}' "$base" 2>/dev/null)" ]; then
    step="tagging $base as $memcached_image"
    docker tag "$base" "$memcached_image"
  fi
}

node() {
  tools
  mkdir -p "$work"
  step="listing the images kubeadm $KUBERNETES_VERSION asks for"
  local images
  images=$("$kube_bin/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null)
  [ -n "$images" ] || { echo "kind build: kubeadm listed no images" >&2; exit 1; }
  memcached
  step="compiling pause"
  local pause=$work/pause
  if [ ! -x "$pause" ] || [ "$here/pause.c" -nt "$pause" ]; then
    gcc -static -Os -o "$pause" "$here/pause.c"
  fi

  step="hashing the node image's inputs"
  local hash tag
  hash=$(
    {
      cat "$repo/ci/kubernetes/versions.env" "$0"
      (cd "$here" && find node pause.c -type f | sort | xargs sha256sum)
      (cd "$kube_bin" && sha256sum kubelet kubeadm kubectl kube-proxy kube-apiserver kube-controller-manager kube-scheduler)
      sha256sum "$etcd_bin/etcd" "$coredns_bin/coredns" "$pause" | cut -d' ' -f1
      docker image inspect --format '{{.Id}}' "$memcached_image"
    } | short_hash
  )
  tag=opconform/kind-node:$KUBERNETES_VERSION-$hash
  if have_image "$tag"; then
    progress "$tag is built already"
    echo "$tag"
    return
  fi

  step="building the root filesystems"
  local node_base proxy_base
  node_base=$(debian_image "$node_packages")
  proxy_base=$(debian_image "$proxy_packages")

  progress "building the images kubeadm asks for"
  local image name
  for image in $images; do
    name=${image%:*}
    name=${name##*/}
    case "$name" in
      kube-apiserver | kube-controller-manager | kube-scheduler)
        static_image "$image" "$kube_bin/$name" "/usr/local/bin/$name" no ;;
      etcd) static_image "$image" "$etcd_bin/etcd" /usr/local/bin/etcd no ;;
      coredns) static_image "$image" "$coredns_bin/coredns" /coredns yes ;;
      pause) static_image "$image" "$pause" /pause yes ;;
      kube-proxy)
        local ctx
        ctx=$(mktemp -d "$work/context.XXXXXX")
        install -m 755 "$kube_bin/kube-proxy" "$ctx/kube-proxy"
        printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' "$proxy_base" >"$ctx/Dockerfile"
        step="building $image"
        build_image -t "$image" "$ctx"
        rm -rf "$ctx" ;;
      *)
        step="mapping $image to a binary"
        echo "kind build: kubeadm asks for $image, which this script does not know how to build" >&2
        exit 1 ;;
    esac
  done

  step="building $tag without its images"
  progress "$step"
  local ctx
  ctx=$(mktemp -d "$work/context.XXXXXX")
  cp -a "$here/node/." "$ctx/"
  mkdir -p "$ctx/bin"
  install -m 755 "$kube_bin/kubelet" "$kube_bin/kubeadm" "$kube_bin/kubectl" "$ctx/bin/"
  build_image --build-arg "BASE=$node_base" \
    --build-arg "KUBERNETES_VERSION=$KUBERNETES_VERSION" -t "$tag-unloaded" "$ctx"
  rm -rf "$ctx"

  # Like kind's own node images: the images are in containerd's content store (not
  # unpacked: the CRI unpacks an image when a pod first uses it).
  step="preloading the images into the node's containerd"
  progress "$step"
  loader=opconform-preload-$hash
  docker rm -f "$loader" >/dev/null 2>&1 || true
  docker run -d --name "$loader" --privileged --entrypoint sleep "$tag-unloaded" infinity >/dev/null
  docker exec "$loader" sh -c 'mkdir -p /run/containerd; containerd >/tmp/containerd.log 2>&1 &
    for i in $(seq 1 120); do ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done; cat /tmp/containerd.log; exit 1'
  for image in $images $memcached_image; do
    docker save "$image" | docker exec -i "$loader" ctr -n k8s.io images import --no-unpack - >/dev/null
  done
  docker exec "$loader" sh -c 'kill $(pidof containerd); while pidof containerd >/dev/null; do sleep 0.2; done; rm -rf /run/containerd /tmp/containerd.log'
  step="committing $tag"
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
    "$loader" "$tag" >/dev/null
  docker rm -f "$loader" >/dev/null
  loader=""
  docker rmi "$tag-unloaded" >/dev/null
  progress "built $tag ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}'))"
  prune_others "$tag"
  echo "$tag"
}

operator() {
  # With the workspace's features, as .ci/run and the tests build it: a build of this
  # package alone would unify other features and build its dependencies once more.
  step="building the operator binary (cargo build --workspace --bins)"
  progress "$step"
  (cd "$repo" && nice -n 19 cargo build --quiet --workspace --bins)
  local target binary hash tag base
  target=${CARGO_TARGET_DIR:-$repo/target}
  binary=$target/debug/memcached-operator
  hash=$(short_hash <"$binary")
  tag=opconform/memcached-operator:$hash
  if have_image "$tag"; then
    progress "$tag is built already"
    echo "$tag"
    return
  fi
  mkdir -p "$work"
  base=$(debian_image "")
  step="building $tag on $base"
  local ctx
  ctx=$(mktemp -d "$work/context.XXXXXX")
  install -m 755 "$binary" "$ctx/memcached-operator"
  # As operator/Dockerfile, on Debian instead of distroless: the same user and ports.
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY memcached-operator /usr/local/bin/memcached-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/memcached-operator"]
DOCKERFILE
  build_image -t "$tag" "$ctx"
  rm -rf "$ctx"
  progress "built $tag"
  prune_others "$tag"
  echo "$tag"
}

step="checking the Docker engine"
docker info --format '{{.ServerVersion}}' >/dev/null ||
  { echo "kind build: the Docker engine does not answer (ci/kind/docker.sh up)" >&2; exit 1; }
case "${1-all}" in
  tools) tools; echo "$kind_bin:$kube_bin" ;;
  node) node ;;
  operator) operator ;;
  base)
    mkdir -p "$work"
    command -v debootstrap >/dev/null 2>&1 || host_packages
    debian_image "" ;;
  all)
    node_image=$(node)
    operator_image=$(operator)
    base_image=$(debian_image "")
    tools
    echo "KIND_TOOLS_PATH=$kind_bin:$kube_bin"
    echo "OPCONFORM_KIND_NODE_IMAGE=$node_image"
    echo "OPCONFORM_IMAGE=$operator_image"
    echo "OPCONFORM_KIND_BASE_IMAGE=$base_image"
    ;;
  *)
    step="reading the arguments"
    echo "usage: ci/kind/build.sh [tools|node|operator|base]" >&2
    exit 2 ;;
esac
