package reflector

import (
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

// health records an informer's list and watch outcomes.
type health struct {
	clock clock.PassiveClock
	mu    sync.Mutex // guards s
	s     Status
}

func newHealth(c clock.PassiveClock) *health { return &health{clock: c} }

// attempt records the outcome of a list or watch call.
func (h *health) attempt(err error) {
	if err != nil {
		h.watchError(err)
		return
	}
	h.mu.Lock()
	h.s.LastSuccess = h.clock.Now()
	h.mu.Unlock()
}

// watchError records an error client-go reports for a running watch (a
// broken connection, an expired resource version).
func (h *health) watchError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.s.LastError = err
	h.s.LastErrorTime = h.clock.Now()
	h.s.WatchErrors++
}

func (h *health) status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}
