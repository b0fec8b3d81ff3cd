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
// A Spawner per user server (Start, Poll, Stop, Progress, state) and a
// Manager for the many servers of a hub.
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
// # Status
//
// All five packages are in place, and each package's documentation states
// its contract. examples/quickstart shows the whole flow,
// examples/orphan-sweeper the orphan clean-up.
package spawnkit
