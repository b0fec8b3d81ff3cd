#!/usr/bin/env bash
# kubespawner.sh installs the real KubeSpawner 7.1 into a venv for
# `make bench-hub` (examples/jupyterhub/hubbench_test.go), as an operator
# installs it on a machine without PyPI: a venv over Debian's JupyterHub
# (python3 -m venv --system-site-packages), and pip install
# --no-build-isolation --no-deps --no-index of `git archive` exports of
# pinned commits of jupyterhub/kubespawner and tomplus/kubernetes_asyncio.
# Their other dependencies are Debian's packages (below). The venv lives
# under spawnkit's cache, keyed by both commits, and is made once; the
# last line printed is its python.
#
# KubeSpawner 7.1 declares jupyterhub>=4; Debian 12 has 3.0. --no-deps
# installs it anyway, and the bench checks that it runs under 3.0 (it
# does: the spawn, the progress stream, the poll and the stop that the
# bench drives). kubernetes_asyncio is 28.2.1, the newest release whose
# declared requirements Debian 12 meets (29.0.0 wants aiohttp>=3.9;
# Debian has 3.8.4); KubeSpawner 7.1 needs >=24.2.3.
#
# Environment:
#   SPAWNKIT_KUBESPAWNER_SRC   a git repository of jupyterhub/kubespawner
#                              (default: /work/.mirror/jupyterhub+kubespawner/repo)
#   SPAWNKIT_K8S_ASYNCIO_SRC   a git repository of tomplus/kubernetes_asyncio
#                              (default: /work/.mirror/tomplus+kubernetes_asyncio/repo)
#   SPAWNKIT_TOOLS_CACHE       parent of the venv's directory
#                              (default: ${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit/tools)
set -euo pipefail

# The tags and the commits they must name: a repository whose tag moved
# is refused, not trusted.
KUBESPAWNER_TAG=7.1.0
KUBESPAWNER_COMMIT=178e6acf57a7579b044f37d0e6092883e5bf04c8
K8S_ASYNCIO_TAG=28.2.1
K8S_ASYNCIO_COMMIT=bb1079f4a7bcc775f272ed6dac94cf7fd827f610

py=/usr/bin/python3
ks_src=${SPAWNKIT_KUBESPAWNER_SRC:-/work/.mirror/jupyterhub+kubespawner/repo}
ka_src=${SPAWNKIT_K8S_ASYNCIO_SRC:-/work/.mirror/tomplus+kubernetes_asyncio/repo}

log() { printf 'kubespawner: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${SPAWNKIT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$home/.cache}/spawnkit/tools}
dir="$cache_root/kubespawner-${KUBESPAWNER_COMMIT:0:12}-k8sasyncio-${K8S_ASYNCIO_COMMIT:0:12}"

# check_commit SRC TAG COMMIT VAR: the repository holds the pinned commit
# under its tag.
check_commit() {
	local src=$1 tag=$2 want=$3 var=$4 got
	git --git-dir="$src" rev-parse --git-dir >/dev/null 2>&1 ||
		git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
		die "$src is not a git repository; set $var to a clone of the project (tag $tag, commit $want)"
	got=$(git --git-dir="$src" rev-parse --verify -q "refs/tags/$tag^{commit}" 2>/dev/null ||
		git -C "$src" rev-parse --verify -q "refs/tags/$tag^{commit}" 2>/dev/null) ||
		die "$src has no tag $tag; set $var to a clone that has it (commit $want)"
	[[ "$got" == "$want" ]] || die "$src: tag $tag is $got, want the pinned $want"
}

if [[ -x "$dir/bin/python" && -f "$dir/.complete" ]]; then
	log "cached ($dir)"
	echo "$dir/bin/python"
	exit 0
fi

[[ -x $py ]] || die "$py missing (apt-get install python3)"
missing=()
$py -c 'import jupyterhub' 2>/dev/null || missing+=(jupyterhub)
$py -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
$py -c 'import hatchling' 2>/dev/null || missing+=(python3-hatchling)
$py -c 'import setuptools' 2>/dev/null || missing+=(python3-setuptools)
$py -c 'import wheel' 2>/dev/null || missing+=(python3-wheel)
# KubeSpawner's and kubernetes_asyncio's runtime dependencies.
$py -c 'import escapism' 2>/dev/null || missing+=(python3-escapism)
$py -c 'import jinja2' 2>/dev/null || missing+=(python3-jinja2)
$py -c 'import slugify' 2>/dev/null || missing+=(python3-slugify)
$py -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
$py -c 'import traitlets' 2>/dev/null || missing+=(python3-traitlets)
$py -c 'import urllib3' 2>/dev/null || missing+=(python3-urllib3)
$py -c 'import aiohttp' 2>/dev/null || missing+=(python3-aiohttp)
$py -c 'import dateutil' 2>/dev/null || missing+=(python3-dateutil)
$py -c 'import six' 2>/dev/null || missing+=(python3-six)
$py -c 'import certifi' 2>/dev/null || missing+=(python3-certifi)
((${#missing[@]} == 0)) || die "missing Debian packages: apt-get install ${missing[*]}"

check_commit "$ks_src" "$KUBESPAWNER_TAG" "$KUBESPAWNER_COMMIT" SPAWNKIT_KUBESPAWNER_SRC
check_commit "$ka_src" "$K8S_ASYNCIO_TAG" "$K8S_ASYNCIO_COMMIT" SPAWNKIT_K8S_ASYNCIO_SRC

rm -rf "$dir"
mkdir -p "$cache_root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONPATH= PYTHONNOUSERSITE=1 PIP_CONFIG_FILE=/dev/null PYTHONDONTWRITEBYTECODE=1
# Only what the builds read: a mirror may lack large blobs nobody installs
# (kubernetes_asyncio's scripts/swagger.json).
export_tree() {
	local src=$1 commit=$2 into=$3
	shift 3
	mkdir -p "$into"
	{ git --git-dir="$src" archive "$commit" -- "$@" 2>/dev/null || git -C "$src" archive "$commit" -- "$@"; } |
		tar -x -C "$into" || die "git archive $commit of $src failed"
}
export_tree "$ks_src" "$KUBESPAWNER_COMMIT" "$work/kubespawner" pyproject.toml README.md LICENSE kubespawner
export_tree "$ka_src" "$K8S_ASYNCIO_COMMIT" "$work/kubernetes_asyncio" setup.py setup.cfg requirements.txt \
	test-requirements.txt MANIFEST.in README.md LICENSE kubernetes_asyncio
log "installing KubeSpawner $KUBESPAWNER_TAG and kubernetes_asyncio $K8S_ASYNCIO_TAG into $dir"
$py -m venv --system-site-packages "$dir"
"$dir/bin/pip" install --no-build-isolation --no-deps --no-index --disable-pip-version-check \
	--no-input --quiet "$work/kubernetes_asyncio" "$work/kubespawner" >&2 ||
	die "pip install failed (above)"
# The installed versions, imported from the venv over Debian's JupyterHub.
(cd "$work" && "$dir/bin/python" -c '
import importlib.metadata as m, jupyterhub, kubespawner, kubernetes_asyncio
print("kubespawner", m.version("jupyterhub-kubespawner"), "kubernetes_asyncio", m.version("kubernetes_asyncio"), "jupyterhub", jupyterhub.__version__)
') >&2 || die "the venv cannot import kubespawner"
touch "$dir/.complete"
echo "$dir/bin/python"
