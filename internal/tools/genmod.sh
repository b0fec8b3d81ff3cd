#!/usr/bin/env bash
# genmod.sh MINOR writes internal/tools/mod/MINOR.mod and .sum: the tools
# module (this directory's cmd/ packages) for the row of
# internal/testcluster/versions.txt with that minor. build.sh builds with
# `go build -modfile=mod/MINOR.mod`, so every minor shares one copy of the
# cmd/ sources and has its own module graph.
#
# k8s.io/kubernetes is not meant to be a dependency: its go.mod points every
# k8s.io staging module at ./staging/src, and a module that requires it must
# replace each of them with the published v0.<minor>.<patch>. The list of
# staging modules is read from that release's own go.mod, so a minor that
# adds or drops one is handled without editing this script.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
minor=${1:?usage: genmod.sh MINOR (e.g. 1.32)}
read -r _ k8s etcd _ < <(awk -v m="$minor" '$1 == m' "$here/../testcluster/versions.txt") || true
if [[ -z "${k8s:-}" ]]; then
	echo "genmod: no row for minor $minor in internal/testcluster/versions.txt" >&2
	exit 1
fi
staging="v0.${k8s#v1.}"

# A staging module whose release the Go module proxy does not serve is
# pinned to the nearest patch it does; each exception says what it touches.
declare -A pin=()
case $k8s in
v1.32.13)
	# The proxy refuses k8s.io/endpointslice v0.32.13 (403, "not
	# available"). Only kube-controller-manager's EndpointSlice controllers
	# import it; kube-apiserver and kube-scheduler are exactly v1.32.13.
	pin[k8s.io/endpointslice]=v0.32.12
	;;
esac

kmod=$(go mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
mapfile -t modules < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/.*#\1#p' "$kmod")
if ((${#modules[@]} == 0)); then
	echo "genmod: found no staging replaces in $kmod" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/cmd" "$work/"
{
	echo "// Tools module for Kubernetes $k8s (etcd $etcd), written by genmod.sh $minor;"
	echo "// build.sh builds with -modfile=mod/$minor.mod."
	echo "module github.com/spawnkit/spawnkit/internal/tools"
	echo
	echo "go 1.26.0"
	echo
	echo "require ("
	echo "	go.etcd.io/etcd/server/v3 $etcd"
	echo "	k8s.io/component-base $staging"
	echo "	k8s.io/kubernetes $k8s"
	echo ")"
	echo
	echo "replace ("
	for m in "${modules[@]}"; do echo "	$m => $m ${pin[$m]:-$staging}"; done
	echo ")"
} >"$work/go.mod"
(cd "$work" && go mod tidy)
mkdir -p "$here/mod"
cp "$work/go.mod" "$here/mod/$minor.mod"
cp "$work/go.sum" "$here/mod/$minor.sum"
echo "wrote internal/tools/mod/$minor.mod" >&2
