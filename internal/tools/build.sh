#!/usr/bin/env bash
# build.sh builds the control-plane binaries spawnkit's tests run against
# (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok) from
# the Go module proxy into a cache directory outside the repository, keyed
# by their versions. A binary already in the cache is never rebuilt. The
# last line printed is the directory.
#
# The versions are a row of internal/testcluster/versions.txt, picked by
# minor: SPAWNKIT_K8S=1.34 (default: the last row, the newest). The row's
# tools module is internal/tools/mod/<minor>.mod (genmod.sh writes it); all
# rows share the cmd/ sources here.
#
# Environment:
#   SPAWNKIT_K8S            Kubernetes minor, e.g. 1.32 (default: newest)
#   SPAWNKIT_TESTBIN_CACHE  parent of the versioned directory
#                           (default: ${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit/testbin)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
table="$here/../testcluster/versions.txt"
minor=${SPAWNKIT_K8S:-$(awk '!/^#/ && NF {m = $1} END {print m}' "$table")}
minor=${minor#v}
read -r _ K8S_VERSION ETCD_VERSION KWOK_VERSION < <(awk -v m="$minor" '$1 == m' "$table") || true
if [[ -z "${K8S_VERSION:-}" ]]; then
	echo "testbin: SPAWNKIT_K8S=$minor is not a supported minor; internal/testcluster/versions.txt has: $(awk '!/^#/ && NF {printf "%s ", $1}' "$table")" >&2
	exit 1
fi
modfile="$here/mod/$minor.mod"

# The row's module file must build the versions the cache is keyed on.
for pair in "k8s.io/kubernetes $K8S_VERSION" "go.etcd.io/etcd/server/v3 $ETCD_VERSION"; do
	if ! grep -q "^[[:space:]]*$pair\$" "$modfile"; then
		echo "testbin: internal/tools/mod/$minor.mod does not require $pair (run internal/tools/genmod.sh $minor)" >&2
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
	(cd "$here" && go build -modfile="$modfile" -mod=readonly -trimpath -ldflags "$kube_ldflags" -o "$dir/.$name.tmp" "$pkg")
}

build etcd gobuild etcd ./cmd/etcd
build kube-apiserver gobuild kube-apiserver ./cmd/kube-apiserver
build kube-scheduler gobuild kube-scheduler ./cmd/kube-scheduler
build kube-controller-manager gobuild kube-controller-manager ./cmd/kube-controller-manager

# kwok's go.mod has no replace directives, so it builds from its own module
# graph with go install; that keeps its dependency versions out of ours. It
# does not depend on the Kubernetes row, so one build per kwok version is
# shared by every row (kwok-<version>/kwok, linked into the row).
kwok_install() {
	local shared="$cache_root/kwok-$KWOK_VERSION"
	if [[ ! -x "$shared/kwok" ]]; then
		local gobin
		gobin=$(mktemp -d)
		GOBIN=$gobin GOFLAGS=-trimpath go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
		mkdir -p "$shared"
		mv "$gobin/kwok" "$shared/.kwok.tmp"
		mv -f "$shared/.kwok.tmp" "$shared/kwok"
		rmdir "$gobin"
	fi
	ln -f "$shared/kwok" "$dir/.kwok.tmp" 2>/dev/null || cp "$shared/kwok" "$dir/.kwok.tmp"
}
build kwok kwok_install

echo "$dir"
