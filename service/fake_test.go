package service

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/spawner"
)

// fakeBackend is an in-memory backend: the handler tests check HTTP
// semantics, not spawning (e2e_test.go does that on a cluster).
type fakeBackend struct {
	mu       sync.Mutex // guards the fields below
	servers  map[serverID]*fakeServer
	spawns   []spawnRequest  // every Spawn's request, in order
	stops    []bool          // every Stop's now, in order
	deleted  []serverID      // every DeleteForever's server, in order
	seeds    []spawner.State // every Seed's state, in order
	profiles []kubespawner.Profile
	// notReady, when set, is what Ready answers.
	notReady error
}

type fakeServer struct {
	status serverStatus
	events []progressEvent
	// changed is closed and replaced on every event.
	changed chan struct{}
}

func newFakeBackend() *fakeBackend { return &fakeBackend{servers: map[serverID]*fakeServer{}} }

// set makes s known in phase, with no events.
func (f *fakeBackend) set(s serverID, phase string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers[s] = &fakeServer{status: fakeStatus(s, phase), changed: make(chan struct{})}
}

// publish adds a progress event to s's operation.
func (f *fakeBackend) publish(s serverID, e progressEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := f.servers[s]
	fs.events = append(fs.events, e)
	close(fs.changed)
	fs.changed = make(chan struct{})
}

func fakeStatus(s serverID, phase string) serverStatus {
	st := serverStatus{User: s.User, Server: s.Name, Phase: phase,
		State: map[string]string{"pod_name": "jupyter-" + s.User, "namespace": "default", "spawnkit_version": "test"}}
	switch phase {
	case "running":
		st.Ready, st.URL = true, "http://10.0.0.1:8888"
	case "stopped", "failed":
		code := 1
		st.ExitCode = &code
	}
	return st
}

func (f *fakeBackend) Spawn(_ context.Context, s serverID, req spawnRequest) (serverStatus, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spawns = append(f.spawns, req)
	if req.UserOptions["profile"] == "nope" {
		return serverStatus{}, false, errBadRequest(reasonInvalidUserOptions, errors.New("no such profile: nope"))
	}
	if fs, ok := f.servers[s]; ok {
		switch fs.status.Phase {
		case "starting", "running":
			return fs.status, false, nil
		case "stopping":
			return serverStatus{}, false, errConflict(errors.New("the server is stopping"))
		}
	}
	fs := &fakeServer{status: fakeStatus(s, "starting"), changed: make(chan struct{})}
	f.servers[s] = fs
	return fs.status, true, nil
}

func (f *fakeBackend) Stop(_ context.Context, s serverID, now bool) (serverStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.servers[s]
	if !ok {
		return serverStatus{}, errNotFound(errors.New("no such server"))
	}
	f.stops = append(f.stops, now)
	fs.status = fakeStatus(s, "stopped")
	return fs.status, nil
}

func (f *fakeBackend) Poll(_ context.Context, s serverID) (serverStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.servers[s]
	if !ok {
		return serverStatus{}, errNotFound(errors.New("no such server"))
	}
	return fs.status, nil
}

func (f *fakeBackend) List(context.Context) ([]serverStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []serverStatus // nil when empty: the handler must answer []
	for _, fs := range f.servers {
		out = append(out, fs.status)
	}
	return out, nil
}

func (f *fakeBackend) Events(ctx context.Context, s serverID) (<-chan progressEvent, error) {
	f.mu.Lock()
	fs, ok := f.servers[s]
	f.mu.Unlock()
	if !ok {
		return nil, errNotFound(errors.New("no such server"))
	}
	out := make(chan progressEvent)
	go func() {
		defer close(out)
		for i := 0; ; {
			f.mu.Lock()
			pending, changed := fs.events[i:], fs.changed
			f.mu.Unlock()
			for _, e := range pending {
				select {
				case out <- e:
				case <-ctx.Done():
					return
				}
				if e.final() {
					return
				}
			}
			i += len(pending)
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Seed records the state; a state in namespace "untrusted" is refused,
// as the Manager refuses one the configuration does not trust.
func (f *fakeBackend) Seed(ctx context.Context, s serverID, st spawner.State) (serverStatus, error) {
	f.mu.Lock()
	f.seeds = append(f.seeds, st)
	f.mu.Unlock()
	if st.Namespace == "untrusted" {
		return serverStatus{}, errStateRefused(errors.New("namespace \"untrusted\" is not trusted"))
	}
	return f.Poll(ctx, s)
}

func (f *fakeBackend) Profiles(context.Context, json.RawMessage) ([]kubespawner.Profile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.profiles, nil
}

func (f *fakeBackend) DeleteForever(_ context.Context, s serverID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, s)
	if srv, ok := f.servers[s]; ok {
		if srv.status.Phase != "stopped" && srv.status.Phase != "failed" {
			return errConflict(errors.New("stop the server first"))
		}
		delete(f.servers, s)
	}
	return nil
}

func (f *fakeBackend) Ready(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notReady
}
