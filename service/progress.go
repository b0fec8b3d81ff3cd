package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// progress streams a server's progress as server-sent events: each event
// has id (its 1-based index in the operation), event (progress, ready,
// failed or stopped) and data (the progressEvent as JSON). A
// Last-Event-ID header resumes after that event (one at or past the end
// gets the final event again). A comment line is sent
// every keepalive while nothing happens, and the stream ends after the
// final event (or when the client goes away).
func (a *api) progress(w http.ResponseWriter, r *http.Request) error {
	after := 0
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errBadRequest(reasonBadRequest, fmt.Errorf("Last-Event-ID %q: want an event id this stream sent", v))
		}
		after = n
	}
	if _, err := a.ownership(r, serverOf(r)); err != nil {
		return err
	}
	events, err := a.b.Events(r.Context(), serverOf(r))
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()

	keepalive := time.NewTicker(a.keepalive)
	defer keepalive.Stop()
	for id := 1; ; id++ {
		var e progressEvent
		for got := false; !got; {
			select {
			case <-r.Context().Done():
				return nil
			case <-keepalive.C:
				if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
					return nil // the client is gone
				}
				_ = rc.Flush()
			case ev, ok := <-events:
				if !ok {
					return nil
				}
				e, got = ev, true
			}
		}
		// The final event is sent even to a client that says it has seen
		// it (a Last-Event-ID at or past the end): a stream always ends
		// with the outcome, never empty.
		if id > after || e.final() {
			data, _ := json.Marshal(e) // plain fields: cannot fail
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", id, e.kind(), data); err != nil {
				return nil
			}
			_ = rc.Flush()
			keepalive.Reset(a.keepalive)
		}
		if e.final() {
			return nil
		}
	}
}
