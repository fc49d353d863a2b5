#!/usr/bin/env bash
# Builds the ipkeeper plugin as it was at an earlier commit, once per commit,
# into a cache outside the checkout, and prints the binary's path: the
# baseline `make bench-etcd BENCH_BASELINE=<commit>` measures the current
# plugin against in the same run.
#
#   scripts/baseline-plugin.sh fe540ff     # the last commit of the first storage layout
#
# The commit is checked out into a temporary git worktree, built static
# (CGO_ENABLED=0, as `make build` builds the current one) and the worktree
# removed again.
set -euo pipefail

rev=${1:?usage: scripts/baseline-plugin.sh <commit>}
sha=$(git rev-parse --verify "$rev^{commit}")
CACHE_DIR=${IPKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ipkeeper}
OUT="$CACHE_DIR/baseline-${sha:0:12}/ipkeeper"

if [[ -x "$OUT" ]]; then
	echo "$OUT"
	exit 0
fi

work=$(mktemp -d)
cleanup() {
	git worktree remove --force "$work/src" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
git worktree add --quiet --detach "$work/src" "$sha" >&2
mkdir -p "$(dirname "$OUT")"
(cd "$work/src" && CGO_ENABLED=0 go build -o "$OUT.tmp" ./cmd/ipkeeper) >&2
mv "$OUT.tmp" "$OUT"
echo "$OUT"
