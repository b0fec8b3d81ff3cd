package manager

import (
	"errors"
	"fmt"

	"github.com/spawnkit/spawnkit/spawner"
)

// The reasons a Status carries besides a *spawner.StartError's and an
// exit's (spawner.ReasonExited, ReasonOOMKilled, ...).
const (
	// ReasonUnschedulable ends a start whose pod stayed unschedulable for
	// UnschedulableTimeout.
	ReasonUnschedulable spawner.Reason = "Unschedulable"
	// ReasonStopped: the hub stopped the server.
	ReasonStopped spawner.Reason = "Stopped"
	// ReasonStopFailed: Stop could not delete the pod (Message says why).
	ReasonStopFailed spawner.Reason = "StopFailed"
	// ReasonClusterUnavailable: the server's cluster has not answered
	// for longer than Options.ClusterDownAfter; its phase is
	// PhaseUnknown until it does (see Status).
	ReasonClusterUnavailable spawner.Reason = "ClusterUnavailable"
	// ReasonInOtherCluster: a start waited for a slot (ConcurrentSpawnLimit)
	// and meanwhile a pod of the server appeared in another cluster; the
	// start made nothing, and the Manager follows that pod.
	ReasonInOtherCluster spawner.Reason = "InOtherCluster"
	// ReasonSplitBrain: the server has pods in more than one cluster
	// (a restore, or another hub): PhaseUnknown, and nothing acts on it
	// until all but one are gone.
	ReasonSplitBrain spawner.Reason = "SplitBrain"
)

// Manager errors.
var (
	// ErrNotFound: the Manager knows no such server.
	ErrNotFound = errors.New("manager: no such server")
	// ErrBusy: the server is doing something that excludes the call
	// (Spawn of a server stopping or being deleted, DeleteForever of one
	// not stopped); the error's text says what. Try again once it is done.
	ErrBusy = errors.New("manager: the server is busy")
	// ErrNotRunning: the Manager is not running (Start has not been
	// called, or has returned).
	ErrNotRunning = errors.New("manager: the manager is not running (call Start)")
	// ErrNotLeader: this replica is a standby; the leader runs servers.
	ErrNotLeader = errors.New("manager: this manager is not the leader")
	// ErrUnschedulable ends a start whose pod stayed unschedulable for
	// UnschedulableTimeout.
	ErrUnschedulable = errors.New("manager: the pod could not be scheduled within UnschedulableTimeout")
	// ErrClusterUnavailable: the cluster the call needs is unavailable
	// (a *ClusterUnavailableError names it and since when).
	ErrClusterUnavailable = errors.New("manager: cluster unavailable")
	// ErrNoSuchCluster: a placement (kubernetes_cluster, Placement, a
	// seeded State) names a cluster the Manager does not run.
	ErrNoSuchCluster = errors.New("manager: no such cluster")
	// ErrSplitBrain: the server has pods in more than one cluster; the
	// Manager acts on none of them (the error names each). It wraps
	// ErrBusy.
	ErrSplitBrain = fmt.Errorf("%w: the server is in more than one cluster", ErrBusy)
	// ErrShutdown is the cause with which a Manager that shuts down, or
	// loses its lease, cancels its starts. It wraps spawner.ErrDetach:
	// starts in flight leave their pods for the next leader to resume.
	ErrShutdown = fmt.Errorf("manager: shutting down or no longer leading: %w", spawner.ErrDetach)
	// ErrStateRefused: a hub's saved State (Seed) cannot be the
	// server's: it names a namespace or cluster this configuration does
	// not trust for it, or a pod of another server. The error says
	// which, and which option keeps a retired place trusted.
	ErrStateRefused = errors.New("manager: the hub's state for the server is refused")
)
