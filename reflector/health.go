package reflector

import (
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Status is the health of one informer.
type Status struct {
	// Synced is true once the first list has been delivered.
	Synced bool
	// Objects is how many objects the informer caches.
	Objects int
	// LastSuccess is when a list or watch call last succeeded.
	LastSuccess time.Time
	// LastError is the most recent list or watch error, and LastErrorTime
	// when it happened; WatchErrors counts them all.
	LastError     error
	LastErrorTime time.Time
	WatchErrors   int
}

// Healthy reports whether the informer has synced and its most recent list
// or watch call succeeded. While the API server is unreachable an informer
// keeps serving its last state; Healthy says that state may be stale.
func (s Status) Healthy() bool {
	return s.Synced && !s.LastSuccess.Before(s.LastErrorTime)
}

// health records an informer's list and watch outcomes. Each failure
// counts once: a failed list or watch call is counted where it is made
// (attempt), and client-go then hands most of these same errors, wrapped,
// to the watch error handler (watchError), which counts only errors it
// has not seen.
type health struct {
	clock clock.PassiveClock
	mu    sync.Mutex // guards s and callErr
	s     Status
	// callErr is the latest failed call's error, until the watch error
	// handler reports it.
	callErr error
}

func newHealth(c clock.PassiveClock) *health { return &health{clock: c} }

// attempt records the outcome of a list or watch call.
func (h *health) attempt(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failedLocked(err)
		h.callErr = err
		return
	}
	h.s.LastSuccess = h.clock.Now()
	h.callErr = nil
}

// watchError records an error client-go's reflector reports: a failed
// call already recorded by attempt, or a failure of its own (a list it
// could not understand or store).
func (h *health) watchError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.callErr != nil && errors.Is(err, h.callErr) {
		h.callErr = nil
		return
	}
	h.failedLocked(err)
}

func (h *health) failedLocked(err error) {
	h.s.LastError = err
	h.s.LastErrorTime = h.clock.Now()
	h.s.WatchErrors++
}

func (h *health) status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}
