// Package testcluster runs a real, local Kubernetes control plane for
// spawnkit's tests, examples and quickstart.
//
// Two levels are offered. APIServer runs etcd and kube-apiserver through
// controller-runtime's envtest: real validation, admission, watches and
// resourceVersions, but no pod ever runs. Lifecycle adds kube-scheduler,
// kube-controller-manager (node lifecycle, garbage collector, namespace
// controllers) and kwok managing fake nodes, so pods are scheduled, get an
// IP, turn Running and Ready and emit real events, owner references
// cascade and namespaces finish terminating. kube-scheduler runs without
// its client rate limit (as kwokctl runs it for benchmarks; kwok has
// none): at its default 50 requests per second, one binding per pod, it
// fell behind a burst of pods created at that rate, and the time to Ready
// measured its queue. Every binary is the upstream
// one built from the Go module proxy by internal/tools (make testbin) into
// a cache directory outside the repository; see DefaultBinDir.
//
// Pods misbehave on demand through BehaviorAnnotation: an image that cannot
// be pulled, a container that exits with a chosen code, a container that
// never becomes ready. A Lifecycle cluster's default StorageClass
// (StorageClass) has kwok provision and bind claims at once, so pods with
// claims schedule, and deleting a claim deletes its volume.
//
// # Loopback pods
//
// Every address a Lifecycle cluster hands out is in 127.0.0.0/8, so that
// whatever connects to a pod stays on this machine (Linux routes all of
// 127/8 to lo; nothing needs configuring). Pods get their IPs from
// Options.PodCIDR, by default a 127.X.0.0/16 that no other cluster on the
// machine holds (an flock on a file in the temporary directory, held until
// Stop or the process's death); Cluster.PodCIDR says which. The fake
// nodes' InternalIP, and so every pod's hostIP, is the range's last host
// address. Start rejects a PodCIDR outside 127.0.0.0/8.
//
// With Options.Responders, an informer on all pods serves each pod that is
// Running with a pod IP: on podIP:containerPort, for every TCP port of
// every container, any request gets 200 and an Answer as JSON (pod,
// namespace, IP and request path). BootDelayAnnotation keeps a pod's ports
// refusing connections for a while after it is seen Running, and
// HoldAnnotation for as long as the pod has it, without delaying
// readiness. A pod's ports stop answering as soon as the informer
// sees it leave Running or deleted, and a new pod given a freed IP gets
// its own responder; a port still held by the old one is retried, not
// fatal. Responders log to responders.log in LogDir and are stopped, every
// goroutine ended, by Stop.
//
// A graceful pod delete is finished as the kubelet finishes it: once the
// pod has a deletion timestamp and no finalizers it is deleted with a UID
// precondition (finisher.go), so a pending delete never removes a new pod
// of the same name. kwok's pod-delete stage, which deletes by name alone,
// is not used.
//
// StopAPIServer and StartAPIServer take the API away and bring it back
// (same address, same certificates, etcd untouched) to test how clients
// ride out an outage; WaitForPod watches one pod until a condition holds.
//
// # Contract
//
// Start returns a cluster whose every component is up (for Lifecycle: every
// node is Ready and schedulable and a warm-up pod has run), or an error
// naming the step that failed and the log directory, with everything
// already started stopped again. Stop stops the responders and every
// process and waits until each has exited. Every component runs with a
// parent-death signal (etcd and kube-apiserver, which envtest starts,
// through setpriv from util-linux), so none outlives a test binary killed
// without teardown, as by go test's -timeout; a test kills such a binary
// and checks. Each component writes to its own file in Cluster.LogDir.
//
// Main is TestMain's body: one cluster per test package, goleak after the
// run, a hard failure under CI=true when the cluster cannot start and a
// skip elsewhere (Require).
package testcluster
