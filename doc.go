// Package spawnkit is a Go SDK for running per-user server pods on
// Kubernetes: what JupyterHub's KubeSpawner does for a Python hub, as
// importable Go packages for Go hubs, spawner services and operators.
//
// This package holds no code; it is the tour. The packages below are
// listed in import order: each may use only those above it.
//
// # naming
//
// Object names from templates, with KubeSpawner 7.1's two slug schemes
// ("escape" and "safe") reproduced to the byte so that a hub moving from
// KubeSpawner finds its users' pods and claims under the same names, plus
// Go text/template with sprig's hermetic functions. Pure functions.
//
// # manifest
//
// Builders for the pod, PVC, secret, service and namespace of a user
// server, with KubeSpawner's semantics. Pure functions of a typed spec.
//
// # reflector
//
// Shared, reference-counted pod and event informers, keyed by resource,
// namespace and selectors, whose health is visible and whose reads wait
// for the first list.
//
// # spawner
//
// A Spawner per user server: Start (with per-start options and a progress
// callback, StartOptions.OnProgress), Resume, Poll, Stop, DeleteForever,
// and the State a hub persists to take a server back after a restart.
// Plan renders what a Start would create without a cluster.
//
// # kubespawner
//
// KubeSpawner's configuration as a pure package: Config holds its options
// under their names, kubespawner.Load reads them from YAML or JSON and
// checks every value, and Config.Resolve applies profile_list to a
// start's user options.
//
// # manager
//
// A Manager (manager.New) runs the many servers of a hub as a controller
// over Spawners: one state machine per server driven by pod events, Watch
// for status changes, recovery from what each pod records after a
// restart, optional leader election (a hub replica serves once
// WaitLeading says it holds the Lease), and Prometheus metrics.
// Package service puts a Manager behind an HTTP API, cmd/spawnkit-service
// deploys that API (replicas with leader election, probes, metrics, TLS;
// manifests in deploy/), and examples/jupyterhub lets a real JupyterHub
// drive it.
//
// # orphan
//
// Finding and safely deleting pods, claims, secrets, services and
// namespaces that no server known to the hub owns.
//
// # Testing against a real cluster
//
// spawnkit is tested against a real kube-apiserver and, for pod
// lifecycles, a simulated cluster of kube-scheduler,
// kube-controller-manager and kwok with fake nodes, all built from the Go
// module proxy (internal/testcluster, internal/tools). `make quickstart`
// spawns servers on one; `make cluster` starts one for you to explore.
//
// examples/quickstart shows the whole flow on such a cluster, and
// examples/orphan-sweeper the orphan clean-up. The Go blocks of README.md
// and docs/ are whole programs for such a cluster; internal/snippets
// builds and runs each one.
package spawnkit
