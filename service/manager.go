// This file is the only one that knows manager.Manager: it adapts the
// Manager to the backend the HTTP API uses.

package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// managerBackend is a backend over one manager.Manager; safe for
// concurrent use as the Manager is.
type managerBackend struct {
	m *manager.Manager
	// hub loads the hubs' own configurations (a start's "config").
	hub *hubConfigs
}

var _ backend = (*managerBackend)(nil)

// Ready is one lock while leading (every request asks). Before the
// Manager has recovered the cluster's servers a request waits for it, as
// the Manager's own calls do, bounded by the request; then a standby is
// NotLeader, with the Manager's Health naming the cause.
func (b *managerBackend) Ready(ctx context.Context) error {
	if b.m.Leading() {
		return nil
	}
	if err := b.m.WaitReady(ctx); err != nil {
		return managerError(err)
	}
	return managerError(b.m.Health().Ready())
}

func (b *managerBackend) DeleteForever(ctx context.Context, s serverID) error {
	return managerError(b.m.DeleteForever(ctx, toServer(s, 0)))
}

func toServer(s serverID, userID int64) naming.Server {
	return naming.Server{Username: s.User, Servername: s.Name, UserID: userID}
}

func (b *managerBackend) Seed(ctx context.Context, s serverID, st spawner.State) (serverStatus, error) {
	status, err := b.m.Seed(ctx, manager.Seed{Server: toServer(s, st.UserID), State: st})
	if err != nil {
		return serverStatus{}, managerError(err)
	}
	return fromStatus(status), nil
}

func (b *managerBackend) Spawn(ctx context.Context, s serverID, req spawnRequest) (serverStatus, bool, error) {
	if req.State != nil {
		// The hub's record first: a server running under it is not
		// started twice, and its claim in use is kept. A refused state
		// (logged by the Manager) does not stop the start: it names no
		// place this start would use.
		if _, err := b.m.Seed(ctx, manager.Seed{Server: toServer(s, req.UserID), State: *req.State}); err != nil &&
			!errors.Is(err, manager.ErrStateRefused) && !errors.Is(err, manager.ErrNotFound) {
			return serverStatus{}, false, managerError(err)
		}
	}
	opts := manager.SpawnOptions{
		UserOptions: req.UserOptions, Env: req.Env, Cmd: req.Cmd, Args: req.Args, UserID: req.UserID,
		HubVersion: req.HubVersion, Attributes: req.Attributes, Hub: req.Hub,
	}
	if len(req.Config) > 0 {
		cfg, err := b.hub.load(req.Config)
		if err != nil {
			return serverStatus{}, false, err
		}
		opts.Config, opts.Admit = cfg, b.hub.policy.Admit
	}
	st, started, err := b.m.Spawn(ctx, toServer(s, req.UserID), opts)
	if err != nil && len(req.Config) > 0 {
		var se *spawner.StartError
		if errors.As(err, &se) && se.Step == spawner.StepPlan && se.Reason == spawner.ReasonInvalid {
			return serverStatus{}, false, errBadRequest(reasonInvalidConfig, err)
		}
	}
	if err != nil {
		return serverStatus{}, false, managerError(err)
	}
	return fromStatus(st), started, nil
}

func (b *managerBackend) Stop(ctx context.Context, s serverID, now bool) (serverStatus, error) {
	st, err := b.m.Stop(ctx, toServer(s, 0), spawner.StopOptions{Now: now})
	if err != nil {
		return serverStatus{}, managerError(err)
	}
	return fromStatus(st), nil
}

func (b *managerBackend) Poll(ctx context.Context, s serverID) (serverStatus, error) {
	st, err := b.m.Poll(ctx, toServer(s, 0))
	if err != nil {
		return serverStatus{}, managerError(err)
	}
	return fromStatus(st), nil
}

func (b *managerBackend) List(context.Context) ([]serverStatus, error) {
	list := b.m.List()
	out := make([]serverStatus, len(list))
	for i, st := range list {
		out[i] = fromStatus(st)
	}
	return out, nil
}

func (b *managerBackend) Events(ctx context.Context, s serverID) (<-chan progressEvent, error) {
	in, err := b.m.Events(ctx, toServer(s, 0))
	if err != nil {
		return nil, managerError(err)
	}
	out := make(chan progressEvent)
	// Owned by the reader: ends when the Manager closes in (after the
	// final event, or when ctx ends) or when ctx ends.
	go func() {
		defer close(out)
		for e := range in {
			select {
			case out <- progressEvent{Progress: e.Progress, Message: e.Message, Ready: e.Ready, URL: e.URL,
				Failed: e.Failed, Reason: string(e.Reason), Stopped: e.Stopped, Time: e.Time, TraceID: e.TraceID}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (b *managerBackend) Profiles(ctx context.Context, config json.RawMessage) ([]kubespawner.Profile, error) {
	cfg := b.m.Config()
	if c := bytes.TrimSpace(config); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		hc, err := b.hub.load(config)
		if err != nil {
			return nil, err
		}
		cfg = *hc
	}
	if cfg.ProfileListFunc != nil {
		return cfg.ProfileListFunc(ctx)
	}
	return cfg.ProfileList, nil
}

func fromStatus(st manager.Status) serverStatus {
	return serverStatus{
		User: st.User, Server: st.Server, Phase: string(st.Phase), Cluster: st.Cluster, URL: st.URL, Ready: st.Ready,
		ExitCode: st.ExitCode, StartedAt: st.StartedAt, ReadyAt: st.ReadyAt,
		Reason: string(st.Reason), Message: st.Message, State: st.State,
	}
}

// managerError maps the Manager's errors to the API's: what the caller
// can act on is 404, 409 or 400, an unavailable cluster 503; the rest
// stays a 500.
func managerError(err error) error {
	var pe *kubespawner.ProfileError
	var se *spawner.StartError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, manager.ErrNotLeader):
		return errUnavailable(reasonNotLeader, err)
	case errors.Is(err, manager.ErrNotRunning), errors.Is(err, manager.ErrShutdown):
		return errUnavailable(reasonNotReady, err)
	case errors.Is(err, manager.ErrClusterUnavailable):
		return errUnavailable(reasonClusterUnavailable, err)
	case errors.Is(err, manager.ErrStateRefused):
		return errStateRefused(err)
	case errors.Is(err, manager.ErrNoSuchCluster):
		// The chosen profile names a cluster this service does not
		// have: another profile may start.
		return errBadRequest(reasonInvalidUserOptions, err)
	case errors.Is(err, manager.ErrNotFound):
		return errNotFound(err)
	case errors.Is(err, manager.ErrBusy):
		return errConflict(err)
	case errors.As(err, &pe):
		return errBadRequest(reasonInvalidUserOptions, err)
	case errors.As(err, &se) && se.Step == spawner.StepPlan:
		// The options resolved to a configuration that cannot start.
		return errBadRequest(reasonInvalidUserOptions, err)
	case kubespawner.IsInvalidConfig(err):
		// The user's choices made the configuration invalid.
		return errBadRequest(reasonInvalidUserOptions, err)
	case naming.IsInvalidName(err):
		// A name no object can have (too long under the escape
		// scheme, NUL, invalid UTF-8).
		return errBadRequest(reasonBadRequest, err)
	}
	return err
}
