#!/usr/bin/env bash
# A tour of ipkeeper without root or a cluster: the plugin is called the way
# a container runtime's main plugin calls its IPAM plugin (config on stdin,
# CNI_* variables), on a local datastore in a temp dir that is removed at
# the end. Run it with `make demo`.
set -euo pipefail

BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin}
for b in ipkeeper ipkeeperctl; do
	[[ -x $BIN/$b ]] || { echo "demo: $BIN/$b missing; run make build" >&2; exit 1; }
done

TMP=$(mktemp -d -t ipkeeper-demo.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
CONF=$TMP/demo.conflist

IPAM=$(cat <<JSON
{
      "type": "ipkeeper",
      "datastore": {"type": "local", "path": "$TMP/store"},
      "ranges": [
        [{"subnet": "10.123.0.0/24", "gateway": "10.123.0.1"}],
        [{"subnet": "fd12:3::/64"}]
      ],
      "blockSize": 28,
      "routes": [{"dst": "0.0.0.0/0"}]
    }
JSON
)

# The network as a runtime stores it; ipkeeperctl reads its ipam section.
cat >"$CONF" <<JSON
{
  "cniVersion": "1.1.0",
  "name": "demo",
  "plugins": [{
    "type": "bridge",
    "ipam": $IPAM
  }]
}
JSON

# What the main plugin (bridge here) hands its IPAM plugin on stdin: its
# own config plus the network's name and cniVersion.
STDIN='{"cniVersion": "1.1.0", "name": "demo", "type": "bridge", "ipam": '$IPAM'}'

if [[ -t 1 ]]; then B=$'\033[1m' N=$'\033[0m'; else B= N=; fi
step() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }

# cni COMMAND CONTAINER: one plugin call. CNI_NETNS names a namespace the
# IPAM plugin never enters (it must not be the plugin's own).
cni() {
	CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$2 CNI_IFNAME=eth0 CNI_PATH=$BIN \
		"$BIN/ipkeeper" <<<"$STDIN"
}

ctl() { "$BIN/ipkeeperctl" --config "$CONF" "$@"; }

step "network config ($CONF)"
cat "$CONF"

for i in 1 2 3 4; do
	step "CNI ADD demo-$i"
	cni ADD "demo-$i"
	echo
done

step "ipkeeperctl show --blocks"
ctl show --blocks

for cidr in $(ctl show --blocks -o json | grep -oE '"(10\.123\.[0-9.]+/[0-9]+|fd12:3:[0-9a-f:]*/[0-9]+)"' | tr -d '"' | sort -u); do
	[[ $cidr == 10.123.0.0/24 || $cidr == fd12:3::/64 ]] && continue # the pools themselves
	step "ipkeeperctl block show $cidr"
	ctl block show "$cidr"
done

for i in 2 3; do
	step "CNI DEL demo-$i"
	cni DEL "demo-$i" && echo "ok (DEL prints nothing on success)"
done

step "ipkeeperctl show --blocks (after two DELs)"
ctl show --blocks

step "done; removing $TMP"
