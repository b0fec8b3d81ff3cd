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
	// ErrShutdown is the cause with which a Manager that shuts down, or
	// loses its lease, cancels its starts. It wraps spawner.ErrDetach:
	// starts in flight leave their pods for the next leader to resume.
	ErrShutdown = fmt.Errorf("manager: shutting down or no longer leading: %w", spawner.ErrDetach)
)
