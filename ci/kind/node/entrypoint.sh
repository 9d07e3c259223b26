#!/bin/bash
# The first process of an opconform kind node (a privileged Docker container started by
# kind): prepares what systemd and the kubelet need from the container, then becomes
# systemd ("$@" is /sbin/init).
set -euo pipefail
say() { echo "opconform node: $*" >&2; }

# systemd in a container expects a read-only /sys (--privileged gives a writable one);
# the cgroup hierarchies mounted under it stay writable.
mount -o remount,ro /sys

# The kubelet mounts volumes that containerd's containers must see: mounts propagate.
mount --make-rshared /

# Every node its own machine id: all nodes start from the same image.
rm -f /etc/machine-id
systemd-machine-id-setup >/dev/null

# cgroup v1 (kind gives each node a private cgroup namespace): kind's kubelet
# configuration sets cgroupRoot /kubelet, which the systemd driver names /kubelet.slice.
# It must exist in every hierarchy before the kubelet starts, and systemd must not remove
# it when it starts: each is bind-mounted onto itself.
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
  mount --make-rprivate /sys/fs/cgroup
  for hierarchy in $(findmnt -lun -o target -t cgroup); do
    for root in kubelet kubelet.slice; do
      mkdir -p "$hierarchy/$root"
      if [ -f "$hierarchy/cpuset.cpus" ]; then
        # An empty cpuset refuses tasks (ENOSPC): inherit the parent's.
        cat "$hierarchy/cpuset.cpus" >"$hierarchy/$root/cpuset.cpus"
        cat "$hierarchy/cpuset.mems" >"$hierarchy/$root/cpuset.mems"
      fi
      mount --bind "$hierarchy/$root" "$hierarchy/$root"
    done
  done
fi

# Docker's DNS server (it knows the other nodes by name) answers the node at 127.0.0.11:
# dockerd redirects that address's port 53 to the server's own ports in this network
# namespace. Inside a pod 127.0.0.11 is the pod's own loopback (CoreDNS forwarding there
# would query itself), so the pods' resolv.conf (the kubelet's --resolv-conf) names the
# node's address instead, redirected to the same server from the node (OUTPUT) and from
# pods (PREROUTING; route_localnet lets the kernel route their packets to a loopback
# address).
node_ip=$(ip -4 -o addr show dev eth0 | awk '{sub("/.*", "", $4); print $4; exit}')
sysctl -qw net.ipv4.conf.all.route_localnet=1
for protocol in udp tcp; do
  port=""
  for _ in $(seq 1 50); do
    port=$(iptables-save -t nat | sed -n "s/^-A DOCKER_OUTPUT .*-p $protocol .*--dport 53 -j DNAT --to-destination 127.0.0.11:\([0-9]*\).*/\1/p" | head -n 1)
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "$port" ] || [ -z "$node_ip" ]; then
    say "no Docker DNS redirection for $protocol found: pods cannot resolve names outside the cluster"
    continue
  fi
  for chain in OUTPUT PREROUTING; do
    iptables -t nat -A "$chain" -d "$node_ip" -p "$protocol" --dport 53 \
      -j DNAT --to-destination "127.0.0.11:$port"
  done
done
sed -e "s/^nameserver 127\..*/nameserver ${node_ip:-127.0.0.11}/" /etc/resolv.conf >/kind/pod-resolv.conf

say "starting $*"
exec "$@"
