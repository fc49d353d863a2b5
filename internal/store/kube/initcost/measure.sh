#!/bin/sh
# Package-init cost of linking internal/store/kube: builds ./with and
# ./without and runs each $1 times (default 30) with GODEBUG=inittrace=1,
# printing the median over runs of the summed init clock time (ms) and the
# number of package inits.
set -eu
cd "$(dirname "$0")"
n=${1:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in with without; do
	go build -o "$tmp/$b" "./$b"
	for i in $(seq "$n"); do
		GODEBUG=inittrace=1 "$tmp/$b" 2>&1 | awk '/^init /{ms+=$5; c++} END{printf "%.3f %d\n", ms, c}'
	done | sort -n | awk -v b="$b" -v size="$(stat -c %s "$tmp/$b")" '{a[NR]=$1; c=$2} END{printf "%-8s binary %d bytes, %d package inits, init clock median %.2f ms, min %.2f, max %.2f\n", b, size, c, a[int((NR+1)/2)], a[1], a[NR]}'
done
