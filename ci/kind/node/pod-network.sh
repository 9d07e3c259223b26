#!/bin/bash
# The pod network of an opconform kind node, in place of kind's kindnetd (which cannot be
# built here): each node's pods get addresses from the node's podCIDR (allocated by the
# controller manager) on point-to-point links (Debian's CNI plugins ptp + host-local),
# and every node routes each other node's podCIDR to that node's address on the kind
# network. Runs as a service for the node's life; re-applies the routes every few seconds
# (a node reconnected to the network has lost them).
#
# Reads the Node objects with the kubelet's own credentials: default-cni.yaml (applied by
# kind as the cluster's CNI manifest) lets the group system:nodes list them.
set -uo pipefail
kubeconfig=/etc/kubernetes/kubelet.conf
conflist=/etc/cni/net.d/10-opconform.conflist
me=$(hostname)

write_conflist() {
  local cidr=$1
  if [ -f "$conflist" ] && grep -qF "\"$cidr\"" "$conflist"; then
    return
  fi
  mkdir -p "$(dirname "$conflist")"
  cat >"$conflist.tmp" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "opconform",
  "plugins": [
    {
      "type": "ptp",
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  mv "$conflist.tmp" "$conflist"
  echo "pod network: pods of $me get addresses in $cidr"
}

while true; do
  if [ -f "$kubeconfig" ]; then
    nodes=$(kubectl --kubeconfig="$kubeconfig" get nodes --request-timeout=5s -o \
      jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' 2>/dev/null)
    while read -r name cidr address; do
      [ -n "$name" ] && [ -n "$cidr" ] || continue
      if [ "$name" = "$me" ]; then
        write_conflist "$cidr"
      elif [ -n "$address" ]; then
        ip route replace "$cidr" via "$address" 2>/dev/null || true
      fi
    done <<<"$nodes"
  fi
  sleep 2
done
