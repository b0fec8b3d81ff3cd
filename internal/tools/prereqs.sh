#!/usr/bin/env bash
# prereqs.sh installs what `make test` needs beyond Go and is missing:
# Debian packages (a real JupyterHub with its python3, Chromium, the
# Python Spawner's build and test modules, pycurl for tornado's curl
# client) and two npm packages under spawnkit's cache. It says what it
# installs; what it cannot install (not root and no password-less sudo, no
# apt-get, no Node.js 20+) it names with the command to run, and exits 1.
# Everything present is left alone, so a warm machine pays one quick check.
#
# Node.js and npm are never installed from Debian: Debian's npm conflicts
# with NodeSource's Node.js, which this project's machines use. Debian's
# prometheus package is installed for its promtool only: its server is
# neither started nor enabled.
#
# Environment:
#   SPAWNKIT_PREREQS=skip   check nothing (a machine that runs only the Go
#                           packages; examples/jupyterhub then fails under
#                           CI=true, naming what is missing)
set -euo pipefail

[[ "${SPAWNKIT_PREREQS:-}" == skip ]] && exit 0

export DEBIAN_FRONTEND=noninteractive
py=/usr/bin/python3

# Node.js first: without NodeSource's, apt-get install jupyterhub would
# pull Debian's older nodejs in as a dependency of its proxy.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if ((node_major < 20)) || ! command -v npm >/dev/null; then
	echo "prereqs: the JupyterHub tests need Node.js 20 or later with npm (found: node ${node_major/#0/none}, npm $(command -v npm || echo none)); install NodeSource's nodejs package (not Debian's npm, which conflicts with it), or run only the Go packages: SPAWNKIT_PREREQS=skip make test" >&2
	exit 1
fi

need=()
command -v make >/dev/null || need+=(make)
# Debian's JupyterHub (3.x) with its python3; the JupyterHub tests drive it.
[[ -x /usr/bin/jupyterhub ]] || need+=(jupyterhub)
# The spawnkit-jupyterhub package (python/) is installed into a venv over
# Debian's JupyterHub, with pip, offline: venv and its build backend.
$py -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
$py -c 'import hatchling' 2>/dev/null || need+=(python3-hatchling)
# The kubernetes client: the Python tests serialize its models as z2jh's
# hub configuration holds them.
$py -c 'import kubernetes.client' 2>/dev/null || need+=(python3-kubernetes)
# pycurl: JupyterHub uses tornado's curl client whenever it imports, as in
# z2jh's hub image; the tests run the Spawner on both clients.
$py -c 'import pycurl' 2>/dev/null || need+=(python3-pycurl)
[[ -x /usr/bin/chromium ]] || need+=(chromium)
# promtool: deploy/prometheus's tests check the shipped rules with it.
# Without recommends, which would add prometheus-node-exporter.
bare=()
[[ -x /usr/bin/promtool ]] || bare+=(prometheus)

if ((${#need[@]} + ${#bare[@]})); then
	cmds=()
	if ((${#need[@]})); then cmds+=("apt-get install -y -qq ${need[*]}"); fi
	if ((${#bare[@]})); then cmds+=("apt-get install -y -qq --no-install-recommends ${bare[*]}"); fi
	need+=("${bare[@]}")
	if ! command -v apt-get >/dev/null; then
		echo "prereqs: missing ${need[*]} and there is no apt-get here; install the equivalents of these Debian packages, or run only the Go packages: SPAWNKIT_PREREQS=skip make test" >&2
		exit 1
	fi
	sudo=()
	if ((EUID != 0)); then
		if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			echo "prereqs: missing ${need[*]}; as root run: apt-get update$(printf ' && %s' "${cmds[@]}")" >&2
			exit 1
		fi
	fi
	echo "prereqs: apt-get install ${need[*]}" >&2
	# prometheus's postinst starts its server (and fails the install
	# when the start fails, as where no init system runs). Where no
	# policy-rc.d says otherwise (containers usually have one that
	# refuses every start), one for the install refuses prometheus's.
	policy=
	if ((${#bare[@]})) && [[ ! -e /usr/sbin/policy-rc.d ]]; then
		policy=/usr/sbin/policy-rc.d
		trap '"${sudo[@]}" rm -f "$policy"' EXIT
		printf '#!/bin/sh\n# prereqs.sh: the tests need promtool, not the server.\ncase "$1" in prometheus | prometheus.service) exit 101 ;; esac\nexit 104\n' |
			"${sudo[@]}" tee "$policy" >/dev/null
		"${sudo[@]}" chmod 755 "$policy"
	fi
	install() {
		"${sudo[@]}" apt-get update -qq || return
		local c
		for c in "${cmds[@]}"; do
			# shellcheck disable=SC2086 # a command of words without spaces
			"${sudo[@]}" $c || return
		done
	}
	log=$(mktemp)
	# The output is shown only when it fails: apt is verbose.
	if ! install >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "prereqs: apt-get install ${need[*]} failed (above)" >&2
		exit 1
	fi
	rm -f "$log"
	if [[ -n $policy ]]; then
		"${sudo[@]}" rm -f "$policy"
		trap - EXIT
	fi
	# The install enabled prometheus's unit: not at the next boot either.
	if ((${#bare[@]})) && [[ -d /run/systemd/system ]]; then
		"${sudo[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	fi
fi

# npm packages, each under its own prefix in spawnkit's cache (where
# examples/jupyterhub/harness_test.go looks): configurable-http-proxy for
# JupyterHub, playwright-core to drive Chromium (it downloads no browser).
cache="${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit"
npm_install() { # prefix package@version file-to-check (under node_modules)
	if [[ ! -e "$cache/$1/node_modules/$3" ]]; then
		echo "prereqs: npm install --prefix $cache/$1 $2" >&2
		npm install --prefix "$cache/$1" --no-audit --no-fund --loglevel=error "$2" >/dev/null
	fi
}
# npm writes node_modules/.package-lock.json last: an install cut short
# is done again.
npm_install chp configurable-http-proxy@5.3 .package-lock.json
npm_install playwright playwright-core@1.65 .package-lock.json
