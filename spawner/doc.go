// Package spawner starts, polls and stops user servers on Kubernetes: a
// Spawner runs one server, doing what KubeSpawner 7.1 does for
// JupyterHub; package manager runs many on this package's exported API.
// The configuration (options, profiles, loading) is package kubespawner's.
//
// A hub creates one reflector.Registry, one Factory per configuration
// (NewFactory checks it once), one Spawner per server (Factory.New),
// calls Start (StartOptions: what changes per start), Poll and Stop, and
// keeps State in its database (LoadState restores it; its names win).
//
// # Start
//
// Start renders every object first (Plan): a start that cannot work fails
// before any API call; a user namespace's quota is checked for room before
// anything of the server exists (ReasonQuotaExceeded). It then creates the
// objects and waits, up to start_timeout, until the pod is ready.
//
// The hub's API token never enters the pod spec: secret_env's variables
// come by secretKeyRef from a Secret that every start replaces. It, the
// internal-SSL secret and the service are owned by the pod, so the
// garbage collector deletes them with it.
//
// Each API request is bounded by k8s_api_request_timeout and retried
// within k8s_api_request_retry_timeout only for errors on an allow-list
// (429, 500, 503, 504, timeouts, lost connections); a try that timed out
// is retried with twice the timeout, up to four times the setting. A
// create whose answer was lost is found by its start id: one start, one
// pod.
//
// A start ends early when a container waits for one of fatal_reasons, an
// image pull fails twice, pending_timeout or unschedulable_timeout (no
// autoscaler on its way) passes with the pod unscheduled, or the pod ends
// or is deleted or replaced (ErrPodGone). A failed Start returns a
// *StartError (Step, Reason) and deletes its pod, and the claim it
// created unless it failed in StepWait with the claim bound; a claim that
// existed before is never deleted. With Options.TracerProvider every
// operation is a span with a child per phase (docs/observability.md).
//
// # Ownership and trust
//
// Object names can collide (the safe slug scheme keeps 32 bits of a
// hash), so every object a start creates carries the raw user and server
// names in annotations, and pods and claims the id of their start,
// written after any configured annotation so no configuration forges
// them. Before
// deleting, replacing or reusing a pod, claim, secret or service, a
// Spawner compares those annotations with its own server: another
// server's object is a *CollisionError and nothing is deleted or mounted.
// A pod of the same server from an earlier start is replaced; a pod
// without owner annotations is never deleted. A claim without them (made
// by KubeSpawner or by hand) is reused, so a migrating hub keeps its
// users' homes.
//
// Anyone who can create a pod can write annotations, so a pod is a
// server's only in a namespace the configuration trusts for it (its own,
// a profile's, a retired one) and under a name its records give (today's
// template, its state record, the hub's saved State):
// Factory.CheckPlacement. A Start first removes a pod the server left
// under earlier names, so a server never has two pods.
//
// # Cancellation and concurrency
//
// A Spawner is safe for concurrent use. Start, Resume, Stop and
// DeleteForever share one operation slot; Poll, State and Server never
// wait for it. Stop first cancels a Start or Resume in flight (or waiting
// for the slot): that start returns a *StartError with ReasonCancelled
// wrapping ErrStartCancelled after deleting its pod and keeping its claim.
// Stop then deletes the pod with delete_grace_period (0 means 0) in one
// request, with the cached pod's uid as precondition, and waits until the
// API server no longer has it, bounded by its ctx and by stop_timeout
// (ErrStopTimeout). A Start whose ctx is cancelled with the cause
// ErrDetach returns and leaves everything for Resume, which waits for the
// existing pod to become ready.
// Close is terminal: it cancels a start in flight with ErrClosed and
// waits for it; every later call returns ErrClosed.
//
// # Poll, State and progress
//
// Poll reads only the shared cache, after its first sync: pending or
// running is "not exited"; a terminated notebook container gives its exit
// code; no pod is exit code 1. delete_stopped_pods deletes a stopped pod
// with a UID precondition, so a newer pod of a racing Start is never
// touched. Every pod records its start's State (nothing secret) in
// naming.AnnotationState, so StateFromPod and LoadState rebuild its URL in
// another process.
//
// StartOptions.OnProgress is called with every step before Start returns;
// progress never falls and stays below 90 until the final event, which is
// 100 with Ready and the URL, or Failed and the reason. Pod events appear
// shaped by event_message_rules (the first matching rule decides) and
// Hooks.EventMessage. StartOptions.Progress takes a Stream instead, which
// never blocks and replays every event, in order, to any number of
// readers.
//
// # Seams for controllers
//
// Spawner.Plan renders a start's objects with a start id; handed to Start
// as StartOptions.Plan they are what that one start creates, provided the
// Spawner is of the same Factory and server and its names have not
// changed (otherwise Start renders again). ReadyPod is the pod version
// the last start found ready.
//
// # Clusters and versions
//
// A Factory with Options.Cluster (a DNS-1123 label) labels every object a
// start creates or updates with naming.LabelCluster, over any configured
// value, and records it in State; LoadState keeps the Factory's cluster.
// A start whose kubernetes_cluster names other clusters only fails with
// ErrOtherCluster. Without Options.Cluster no cluster is named.
//
// CheckServerVersion refuses an API server older than 1.MinServerMinor
// with ErrServerTooOld, naming both. A server may create a pod without a
// field spawnkit sent (an older release, a feature gate that is off, a
// webhook) and still answer success: Start compares the pod returned with
// the pod sent (fields set, by presence; unnamed list entries by content;
// label and annotation keys) and, unless allowed_dropped_fields allows
// it, fails with a *FieldsDroppedError naming every missing field and the
// server's version, and deletes the pod. A value rewritten in place is
// not detected.
package spawner
