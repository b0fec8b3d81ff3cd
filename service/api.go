package service

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/spawner"
)

// backend is what the HTTP API needs of spawnkit. The handlers see only
// this interface and the types below, which mirror the wire format, so the
// API does not move when manager.Manager does: manager.go adapts
// the Manager to it, and the tests use an in-memory fake.
//
// Errors a backend returns for the caller's input or for a state the
// caller can act on are made with errNotFound, errConflict or
// errBadRequest; anything else is the service's own failure (500).
type backend interface {
	// Spawn starts a server in the background. When it is already
	// starting or running nothing is restarted: it returns the current
	// status and started=false.
	Spawn(ctx context.Context, s serverID, req spawnRequest) (st serverStatus, started bool, err error)
	// Stop cancels a start in flight, deletes the pod and waits until it
	// is gone (bounded by ctx); now means a grace period of 0.
	Stop(ctx context.Context, s serverID, now bool) (serverStatus, error)
	// Poll reports a server as KubeSpawner's poll sees it.
	Poll(ctx context.Context, s serverID) (serverStatus, error)
	// List reports every server, sorted by user and server.
	List(ctx context.Context) ([]serverStatus, error)
	// Events replays the current (or last) operation's progress from its
	// start and follows it; the channel closes after the final event or
	// when ctx ends.
	Events(ctx context.Context, s serverID) (<-chan progressEvent, error)
	// Seed gives the service the state the hub saved for a server
	// (manager.Manager.Seed) and returns its status: a server the
	// service may not know (it, or the hub, restarted under a changed
	// configuration) is found where the hub's state says. A state the
	// configuration cannot trust is a conflict (reason StateRefused).
	Seed(ctx context.Context, s serverID, st spawner.State) (serverStatus, error)
	// Profiles is the profile list the options form offers (read-only):
	// the service's own, or, when config is not empty, that of the hub's
	// configuration (a bad one is a 400 naming the option).
	Profiles(ctx context.Context, config json.RawMessage) ([]kubespawner.Profile, error)
	// DeleteForever deletes a stopped server for good (JupyterHub's
	// delete_forever: its claim when so configured); a server that is
	// not stopped is a conflict.
	DeleteForever(ctx context.Context, s serverID) error
	// Ready is nil when this replica may answer; else an error made with
	// errUnavailable (503) naming why. It is called on every request, so
	// it must be cheap once the replica is ready; before, it may wait,
	// bounded by ctx.
	Ready(ctx context.Context) error
}

// serverID names a server; Name "" is the user's default server.
type serverID struct {
	User, Name string
	// Hub is the requesting hub's HubHeader ("" without one).
	Hub string
}

// spawnRequest is a decoded POST body.
type spawnRequest struct {
	// UserOptions have KubeSpawner's keys: "profile", "<option>",
	// "<option>--unlisted-choice".
	UserOptions map[string]string
	// Env is sorted by name.
	Env []corev1.EnvVar
	// Cmd nil means the configuration's cmd.
	Cmd, Args []string
	UserID    int64
	// HubVersion is the hub's version, written on the pod as
	// hub.jupyter.org/jupyterhub-version (as KubeSpawner does).
	HubVersion string
	// Attributes are the resource attributes the hub set on its Spawner
	// (spawner.StartOptions.Attributes).
	Attributes map[string]any
	// State, when not nil, is the state the hub saved for the server:
	// seeded (Seed) before the start, so that a server already running
	// under it is not started twice and its claim in use is kept.
	State *spawner.State
	// Hub is the hub starting the server (HubHeader), recorded in its
	// state.
	Hub string
	// Config, when not empty, is the hub's own configuration for this
	// start: a JSON object of KubeSpawner options set over the service's
	// configuration, bounded by its HubPolicy.
	Config json.RawMessage
}

// serverStatus is the status JSON of every server endpoint.
type serverStatus struct {
	User   string `json:"user"`
	Server string `json:"server"`
	// Phase is stopped, starting, running, stopping or failed; or
	// unknown, which is no state of the server: its cluster is
	// unavailable (reason ClusterUnavailable, exit_code null: the server
	// counts as running) or it has pods in two clusters (SplitBrain).
	Phase string `json:"phase"`
	// Cluster is the cluster the server is in, with several clusters.
	Cluster string `json:"cluster,omitempty"`
	URL     string `json:"url,omitempty"`
	Ready   bool   `json:"ready"`
	// ExitCode is null while the server is starting or running, as
	// KubeSpawner's poll returns None.
	ExitCode  *int       `json:"exit_code"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Message   string     `json:"message,omitempty"`
	State     any        `json:"state"`
}

// progressEvent is one step of an operation.
type progressEvent struct {
	Progress int       `json:"progress"` // 0..100, 100 only on the final event
	Message  string    `json:"message"`
	Ready    bool      `json:"ready"` // final event of a successful start
	URL      string    `json:"url"`
	Failed   bool      `json:"failed"` // final event of a failed operation
	Reason   string    `json:"reason"`
	Stopped  bool      `json:"stopped"` // final event of a successful stop
	Time     time.Time `json:"time"`
	// TraceID is the trace id of the request that began the operation,
	// when it sent a traceparent: a hub's trace and spawnkit's meet.
	TraceID string `json:"trace_id,omitempty"`
}

// final reports whether e ends its stream.
func (e progressEvent) final() bool { return e.Ready || e.Failed || e.Stopped || e.Progress >= 100 }

// kind is the SSE event name.
func (e progressEvent) kind() string {
	switch {
	case e.Ready:
		return "ready"
	case e.Failed:
		return "failed"
	case e.Stopped:
		return "stopped"
	}
	return "progress"
}

// Error reasons, the "reason" of an error body.
const (
	reasonBadRequest         = "BadRequest"
	reasonInvalidUserOptions = "InvalidUserOptions"
	reasonNotFound           = "NotFound"
	reasonConflict           = "Conflict"
	reasonUnauthorized       = "Unauthorized"
	reasonTooLarge           = "RequestEntityTooLarge"
	reasonMethodNotAllowed   = "MethodNotAllowed"
	reasonInternal           = "InternalError"
	reasonNotLeader          = "NotLeader"
	reasonNotReady           = "NotReady"
	// reasonClusterUnavailable: the server's cluster (for a start, every
	// cluster it may go to) has not answered for a while. Unlike
	// NotLeader and NotReady, another replica would answer the same.
	reasonClusterUnavailable = "ClusterUnavailable"
	// reasonStateRefused: the hub's saved state for a server names a
	// namespace or cluster the configuration does not trust for it (not
	// listed as retired), or a pod of another server (409).
	reasonStateRefused = "StateRefused"
	// reasonInvalidConfig: the hub's configuration (a start's "config")
	// has an unknown option, a bad value, or makes a pod the service's
	// hub_policy does not allow (400, naming the option).
	reasonInvalidConfig = "InvalidConfig"
)

// apiError is an error the API answers with its own status and reason
// rather than 500.
type apiError struct {
	Status int    // HTTP status
	Reason string // CamelCase reason
	Err    error
	// RetryAfter, when set, is sent as Retry-After (whole seconds).
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Err.Error() }
func (e *apiError) Unwrap() error { return e.Err }

// errNotFound reports an unknown server (404).
func errNotFound(err error) error {
	return &apiError{Status: http.StatusNotFound, Reason: reasonNotFound, Err: err}
}

// errConflict reports an operation in flight that forbids this one (409).
func errConflict(err error) error {
	return &apiError{Status: http.StatusConflict, Reason: reasonConflict, Err: err}
}

// errStateRefused reports a hub's state the service cannot trust (409).
func errStateRefused(err error) error {
	return &apiError{Status: http.StatusConflict, Reason: reasonStateRefused, Err: err}
}

// errBadRequest reports input that cannot be used (400); reason is
// reasonBadRequest or reasonInvalidUserOptions.
func errBadRequest(reason string, err error) error {
	return &apiError{Status: http.StatusBadRequest, Reason: reason, Err: err}
}

// errUnavailable reports a replica that must not answer now (503, with
// Retry-After): reason reasonNotLeader (another replica leads),
// reasonNotReady (still recovering, or stopped) or
// reasonClusterUnavailable (the server's cluster does not answer).
func errUnavailable(reason string, err error) error {
	return &apiError{Status: http.StatusServiceUnavailable, Reason: reason, Err: err, RetryAfter: time.Second}
}
