package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/manager"
)

// prepareManager runs a Manager on a warm Registry, as a hub does, and
// waits until it has recovered the (empty) namespace. The spawns call
// Spawn for every server at once, as a hub's request handlers would, and
// end when Watch has reported every server running; a server that fails
// fails the run.
func prepareManager(ctx context.Context, client kubernetes.Interface, spec spawnRun) (spawnFunc, func(), error) {
	registry, release, err := warmRegistry(ctx, client, spec.Namespace, !spec.NoEvents)
	if err != nil {
		return nil, nil, err
	}
	config := spawnConfig(spec.Namespace)
	config.EventsEnabled = new(!spec.NoEvents)
	m, stop, err := startManager(ctx, manager.Options{Client: client, Registry: registry, Config: config,
		ConcurrentSpawnLimit: spec.SpawnLimit, TracerProvider: spec.tp})
	if err != nil {
		release()
		return nil, nil, err
	}
	spawns, stopWatch := managerSpawns(ctx, m, manager.SpawnOptions{})
	return spawns, func() { stopWatch(); stop(); release() }, nil
}

// startManager makes a Manager of opts and runs it until stop, which
// waits until it has ended; it returns once the Manager has recovered
// the cluster's servers.
func startManager(ctx context.Context, opts manager.Options) (*manager.Manager, func(), error) {
	m, err := manager.New(opts)
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error // written by the Manager's goroutine, read after wg.Wait
	wg.Go(func() { runErr = m.Start(runCtx) })
	stop := func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			fmt.Fprintln(os.Stderr, "benchreport: the Manager:", runErr) // stdout is the result
		}
	}
	// Poll waits until the Manager has recovered the cluster's servers;
	// then an unknown server is ErrNotFound.
	if _, err := m.Poll(ctx, serverOf(-1)); !errors.Is(err, manager.ErrNotFound) {
		stop()
		return nil, nil, fmt.Errorf("waiting for the Manager to run: %w", err)
	}
	return m, stop, nil
}

// managerSpawns are spawns through m with opts; stopWatch ends the watch
// they follow.
func managerSpawns(ctx context.Context, m *manager.Manager, opts manager.SpawnOptions) (spawns spawnFunc, stopWatch func()) {
	// The watch is opened before the clock so that no change is missed.
	watchCtx, cancelWatch := context.WithCancel(ctx)
	watch := m.Watch(watchCtx)
	return func(ctx context.Context, first, n int, ready func()) error {
		users := make(map[string]bool, n) // the servers of this call
		for i := first; i < first+n; i++ {
			users[serverOf(i).Username] = true
		}
		spawned := make(chan error, 1)
		go func() {
			spawned <- spawnAll(ctx, first, n, func(ctx context.Context, i int) error {
				if _, _, err := m.Spawn(ctx, serverOf(i), opts); err != nil {
					return fmt.Errorf("spawning %s: %w", serverOf(i).Username, err)
				}
				return nil
			})
		}()
		running := map[string]bool{}
		for len(running) < n {
			select {
			case st, ok := <-watch:
				if !ok {
					return fmt.Errorf("the Manager's watch ended with %d of %d servers running", len(running), n)
				}
				if !users[st.User] {
					continue // the warm-up's, before this call
				}
				switch st.Phase {
				case manager.PhaseRunning:
					if !running[st.User] {
						running[st.User] = true
						ready()
					}
				case manager.PhaseFailed:
					return fmt.Errorf("server of %s failed: %s: %s", st.User, st.Reason, st.Message)
				}
			case err := <-spawned:
				if err != nil {
					return err
				}
				spawned = nil
			case <-ctx.Done():
				return fmt.Errorf("%d of %d servers running: %w", len(running), n, ctx.Err())
			}
		}
		if spawned != nil {
			return <-spawned
		}
		return nil
	}, cancelWatch
}
