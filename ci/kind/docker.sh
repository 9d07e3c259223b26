#!/usr/bin/env bash
# A Docker engine for kind, and only what this machine lacks of it.
#
#   ci/kind/docker.sh up     install docker.io from Debian when dockerd is absent, make
#                            privileged containers work (see below), start dockerd when it
#                            does not answer
#   ci/kind/docker.sh down   stop dockerd if `up` started it; anything else is left alone
#
# kind runs its nodes with `docker run --privileged`, which asks runc for every
# capability. Where the capability bounding set lacks one (CAP_SYS_RESOURCE on some CI
# machines), runc fails with "unable to apply caps: operation not permitted". `up` checks
# the bounding set and, only when something is missing, registers runc-wrapper.sh (which
# removes the missing capabilities from each container's configuration before calling
# runc) as dockerd's default runtime in /etc/docker/daemon.json.
#
# What `up` started is recorded under the cache directory
# (${OPCONFORM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opconform}/docker), so `down` stops
# exactly that. Progress goes to stderr; a failure names its step. Installing and starting
# dockerd need root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${OPCONFORM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/opconform}
state=$cache_root/docker
wrapper=/usr/local/libexec/opconform/runc-wrapper
runtime_name=opconform-runc
daemon_json=/etc/docker/daemon.json

step=""
progress() { echo "docker: $*" >&2; }
trap 'status=$?; if [ $status -ne 0 ]; then echo "docker: failed while: $step (exit $status)" >&2; fi' EXIT

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "docker: $step needs root (run ci/kind/docker.sh as root, or start Docker yourself)" >&2
    exit 1
  fi
}

# Capabilities (names) of the full set that the bounding set of this process lacks.
missing_caps() {
  local bnd last bit names
  bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  last=$(cat /proc/sys/kernel/cap_last_cap)
  # The capabilities runc is asked for, by number (linux/capability.h).
  names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
    LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
    SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
    SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
    MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
    CHECKPOINT_RESTORE)
  for bit in $(seq 0 "$last"); do
    if [ $(((bnd >> bit) & 1)) = 0 ] && [ -n "${names[$bit]-}" ]; then
      echo "CAP_${names[$bit]}"
    fi
  done
}

install_packages() {
  local packages=()
  command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
  if [ -n "$(missing_caps)" ]; then
    command -v jq >/dev/null 2>&1 || packages+=(jq)
  fi
  [ ${#packages[@]} -gt 0 ] || return 0
  step="installing ${packages[*]} from Debian (apt-get)"
  need_root
  progress "$step"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}

# Registers the wrapper as the default runtime when the bounding set lacks capabilities;
# sets daemon_changed=1 when daemon.json was written.
daemon_changed=0
configure_runtime() {
  local missing
  missing=$(missing_caps | tr '\n' ' ')
  if [ -z "$missing" ]; then
    progress "the capability bounding set is complete: plain runc runs privileged containers"
    return 0
  fi
  step="installing the runc wrapper (the bounding set lacks: $missing)"
  local runc_path
  runc_path=$(command -v runc || true)
  [ -n "$runc_path" ] || { echo "docker: runc is not installed (Debian's docker.io depends on it)" >&2; exit 1; }
  local want
  want=$(sed -e "s|@RUNC@|$runc_path|" -e "s|@DROP@|${missing% }|" "$here/runc-wrapper.sh")
  if [ ! -f "$wrapper" ] || [ "$(cat "$wrapper")" != "$want" ]; then
    need_root
    progress "$step"
    mkdir -p "$(dirname "$wrapper")"
    printf '%s\n' "$want" >"$wrapper.tmp"
    chmod 755 "$wrapper.tmp"
    mv "$wrapper.tmp" "$wrapper"
  fi
  step="registering the runc wrapper as dockerd's default runtime in $daemon_json"
  local current='{}' next
  [ -s "$daemon_json" ] && current=$(cat "$daemon_json")
  next=$(printf '%s' "$current" | jq --arg name "$runtime_name" --arg path "$wrapper" \
    '.runtimes[$name] = {path: $path} | .["default-runtime"] = $name')
  if [ "$(printf '%s' "$current" | jq -S .)" != "$(printf '%s' "$next" | jq -S .)" ]; then
    need_root
    progress "$step"
    mkdir -p "$(dirname "$daemon_json")"
    printf '%s\n' "$next" >"$daemon_json"
    daemon_changed=1
  fi
}

engine_answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

up() {
  install_packages
  configure_runtime
  mkdir -p "$state"
  if engine_answers; then
    if [ "$daemon_changed" = 1 ]; then
      step="using the running dockerd"
      echo "docker: dockerd is running with a configuration older than $daemon_json; restart it so that privileged containers work" >&2
      exit 1
    fi
    local pid
    pid=$(cat "$state/dockerd.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
      progress "dockerd is running, started by an earlier up (down stops it)"
    else
      rm -f "$state/dockerd.pid"
      progress "dockerd is running already (down leaves it running)"
    fi
    return 0
  fi
  step="starting dockerd"
  need_root
  progress "$step (log: $state/dockerd.log)"
  # setsid: dockerd outlives this script and the caller's process group.
  setsid dockerd >"$state/dockerd.log" 2>&1 </dev/null &
  echo $! >"$state/dockerd.pid"
  local i
  for i in $(seq 1 120); do
    engine_answers && break
    if ! kill -0 "$(cat "$state/dockerd.pid")" 2>/dev/null; then
      tail -n 20 "$state/dockerd.log" >&2
      rm -f "$state/dockerd.pid"
      exit 1
    fi
    sleep 0.5
  done
  step="waiting for dockerd to answer (60s)"
  engine_answers
  progress "dockerd $(docker info --format '{{.ServerVersion}}, default runtime {{.DefaultRuntime}}, cgroup {{.CgroupVersion}}') started"
}

down() {
  step="stopping the dockerd that up started"
  local pidfile=$state/dockerd.pid
  if [ ! -f "$pidfile" ]; then
    progress "dockerd was not started by ci/kind/docker.sh up: left alone"
    return 0
  fi
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    progress "$step (pid $pid)"
    kill -TERM "$pid"
    local i
    for i in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "docker: dockerd (pid $pid) did not stop within 30s" >&2
      exit 1
    fi
  fi
  rm -f "$pidfile"
  progress "dockerd stopped"
}

case "${1-}" in
  up) up ;;
  down) down ;;
  *)
    step="reading the arguments"
    echo "usage: ci/kind/docker.sh up|down" >&2
    exit 2
    ;;
esac
