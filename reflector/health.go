package reflector

import (
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// Denied is the API server's refusal (Forbidden or Unauthorized) of
	// the informer's watch, or of its list while no watch has succeeded
	// since: a missing RBAC verb. client-go retries such calls forever
	// and a list that succeeds between refused watches keeps the cache
	// synced but stale, so Synced and Healthy alone cannot tell a
	// misconfigured Role from a blip. Nil once the refused kind of call
	// succeeds.
	Denied error
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
	// denied is the latest refusal of each kind of call, until one of
	// that kind succeeds (a watch's success also clears a list's: a
	// streamed list is a watch).
	denied [2]error
}

// call is the kind of an informer's call to the API server.
type call int

const (
	callList call = iota
	callWatch
)

func newHealth(c clock.PassiveClock) *health { return &health{clock: c} }

// attempt records the outcome of a list or watch call.
func (h *health) attempt(kind call, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failedLocked(err)
		h.callErr = err
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			h.denied[kind] = err
		}
		return
	}
	h.s.LastSuccess = h.clock.Now()
	h.callErr = nil
	h.denied[kind] = nil
	if kind == callWatch {
		h.denied[callList] = nil
	}
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
	s := h.s
	s.Denied = h.denied[callWatch]
	if s.Denied == nil {
		s.Denied = h.denied[callList]
	}
	return s
}
