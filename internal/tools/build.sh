#!/usr/bin/env bash
# build.sh builds the control-plane binaries spawnkit's tests run against
# (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok) from
# the Go module proxy into a cache directory outside the repository, keyed
# by their versions. A binary already in the cache is never rebuilt. The
# last line printed is the directory.
#
# Environment:
#   SPAWNKIT_TESTBIN_CACHE  parent of the versioned directory
#                           (default: ${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit/testbin)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../testcluster/versions.env
source "$here/../testcluster/versions.env"

# The tools module's go.mod must build the versions the cache is keyed on.
for pair in "k8s.io/kubernetes $K8S_VERSION" "go.etcd.io/etcd/server/v3 $ETCD_VERSION"; do
	if ! grep -q "^[[:space:]]*$pair\$" "$here/go.mod"; then
		echo "testbin: internal/tools/go.mod does not require $pair (see internal/testcluster/versions.env)" >&2
		exit 1
	fi
done

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${SPAWNKIT_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$home/.cache}/spawnkit/testbin}
dir="$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
mkdir -p "$dir"

log() { printf 'testbin: %s\n' "$*" >&2; }

# build NAME CMD... runs CMD to produce $dir/NAME unless it already exists.
# It builds into a temporary name first so an interrupted build never
# leaves a half-written binary that a later run would trust.
build() {
	local name=$1
	shift
	if [[ -x "$dir/$name" ]]; then
		log "$name: cached"
		return
	fi
	local start=$SECONDS
	log "$name: building (this takes a while on a cold cache)..."
	# A cold kube-apiserver build is silent for minutes: say it is alive.
	(while sleep 30; do log "$name: still building ($((SECONDS - start))s)"; done) &
	local ticker=$!
	local rc=0
	"$@" || rc=$?
	kill "$ticker" 2>/dev/null
	wait "$ticker" 2>/dev/null || true
	if ((rc != 0)); then
		log "$name: build failed (exit $rc)"
		exit "$rc"
	fi
	mv -f "$dir/.$name.tmp" "$dir/$name"
	log "$name: built in $((SECONDS - start))s"
}

kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${K8S_VERSION#v}") \
 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION") \
 -X k8s.io/component-base/version.gitTreeState=clean"

gobuild() {
	local name=$1 pkg=$2
	(cd "$here" && go build -mod=readonly -trimpath -ldflags "$kube_ldflags" -o "$dir/.$name.tmp" "$pkg")
}

build etcd gobuild etcd ./cmd/etcd
build kube-apiserver gobuild kube-apiserver ./cmd/kube-apiserver
build kube-scheduler gobuild kube-scheduler ./cmd/kube-scheduler
build kube-controller-manager gobuild kube-controller-manager ./cmd/kube-controller-manager

# kwok's go.mod has no replace directives, so it builds from its own module
# graph with go install; that keeps its dependency versions out of ours.
kwok_install() {
	local gobin
	gobin=$(mktemp -d)
	GOBIN=$gobin GOFLAGS=-trimpath go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	mv "$gobin/kwok" "$dir/.kwok.tmp"
	rmdir "$gobin"
}
build kwok kwok_install

echo "$dir"
