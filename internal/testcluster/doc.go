// Package testcluster runs a real, local Kubernetes control plane for
// spawnkit's tests, examples and quickstart.
//
// Two levels are offered. APIServer runs etcd and kube-apiserver through
// controller-runtime's envtest: real validation, admission, watches and
// resourceVersions, but no pod ever runs. Lifecycle adds kube-scheduler,
// kube-controller-manager (node lifecycle, garbage collector, namespace
// controllers) and kwok managing fake nodes, so pods are scheduled, get an
// IP, turn Running and Ready and emit real events, owner references
// cascade and namespaces finish terminating. Every binary is the upstream
// one built from the Go module proxy by internal/tools (make testbin) into
// a cache directory outside the repository; see DefaultBinDir.
//
// Pods misbehave on demand through BehaviorAnnotation: an image that cannot
// be pulled, a container that exits with a chosen code, a container that
// never becomes ready. A Lifecycle cluster's default StorageClass
// (StorageClass) has kwok provision and bind claims at once, so pods with
// claims schedule, and deleting a claim deletes its volume.
// StopAPIServer and StartAPIServer take the API away and bring it back
// (same address, same certificates, etcd untouched) to test how clients
// ride out an outage; WaitForPod watches one pod until a condition holds.
//
// # Contract
//
// Start returns a cluster whose every component is up (for Lifecycle: every
// node is Ready and schedulable and a warm-up pod has run), or an error
// naming the step that failed and the log directory, with everything
// already started stopped again. Stop stops every process and waits until
// each has exited. Every component runs with a parent-death signal
// (etcd and kube-apiserver, which envtest starts, through setpriv from
// util-linux), so none outlives a test binary killed without teardown, as
// by go test's -timeout; a test kills such a binary and checks. Each component writes to its own file in
// Cluster.LogDir.
//
// Main is TestMain's body: one cluster per test package, goleak after the
// run, a hard failure under CI=true when the cluster cannot start and a
// skip elsewhere (Require).
package testcluster
