package spawner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testutil"
)

// collect reads ch until it closes, or fails the test after a while.
func collect(t *testing.T, ch <-chan ProgressEvent) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, e.Message)
		case <-timeout:
			t.Fatalf("the stream did not end; read %q", got)
			return nil
		}
	}
}

func messages(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprint("step ", i))
	}
	return out
}

// TestStreamReadersSeeEveryEventInOrder publishes more events than a new
// Stream has room for while readers replay and follow it: a reader that
// began before the first event, one that began midway and one that began
// ahead of the stream each see what they asked for, in order, and end
// with the final event.
func TestStreamReadersSeeEveryEventInOrder(t *testing.T) {
	const n = 3 * streamEvents
	st := NewStream()
	ctx := t.Context()
	early := st.Events(ctx, 0)
	ahead := st.Events(ctx, n/2) // from an event not yet published
	var mid <-chan ProgressEvent
	for i := range n {
		if i == n/3 {
			mid = st.Events(ctx, 0)
		}
		st.Publish(ProgressEvent{Message: fmt.Sprint("step ", i)})
		if i%5 == 0 && i < n/2 {
			// The ahead reader, with nothing to send yet, waits again
			// before the next event.
			testutil.Eventually(t, 10*time.Second, "the ahead reader to wait again", testutil.True(func() bool {
				st.mu.Lock()
				defer st.mu.Unlock()
				return st.changed != nil
			}))
		}
	}
	st.Publish(ProgressEvent{Message: "ready", Ready: true})
	st.Publish(ProgressEvent{Message: "after the end"}) // dropped
	want := append(messages(0, n), "ready")
	for name, c := range map[string]struct {
		ch   <-chan ProgressEvent
		want []string
	}{
		"early": {early, want},
		"mid":   {mid, want},
		"ahead": {ahead, want[n/2:]},
	} {
		if got := collect(t, c.ch); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s reader: got %q, want %q", name, got, c.want)
		}
	}
	if !st.Done() {
		t.Error("the stream is not done after its final event")
	}
}

// TestStreamCloseEndsWaitingReaders closes a stream that readers are
// waiting on: their channels close, without a final event.
func TestStreamCloseEndsWaitingReaders(t *testing.T) {
	st := NewStream()
	st.Publish(ProgressEvent{Message: "one"})
	var wg sync.WaitGroup
	got := make([][]string, 4)
	for i := range got {
		ch := st.Events(t.Context(), 0)
		// Once a reader has had the one event there is, it waits for a
		// change.
		first := <-ch
		wg.Go(func() { got[i] = append([]string{first.Message}, collect(t, ch)...) })
	}
	st.Close()
	wg.Wait()
	for i, g := range got {
		if fmt.Sprint(g) != "[one]" {
			t.Errorf("reader %d: got %q, want [one]", i, g)
		}
	}
	if later := collect(t, st.Events(t.Context(), 0)); fmt.Sprint(later) != "[one]" {
		t.Errorf("a reader after Close: got %q, want [one]", later)
	}
}

// TestStreamReaderEndsWithItsContext: a reader that stops reading ends
// its goroutine with its context, though the stream goes on.
func TestStreamReaderEndsWithItsContext(t *testing.T) {
	st := NewStream()
	ctx, cancel := context.WithCancel(t.Context())
	ch := st.Events(ctx, 0)
	st.Publish(ProgressEvent{Message: "one"})
	<-ch
	cancel()
	if got := collect(t, ch); len(got) > 0 {
		// The reader may have had the next event in hand; there is none.
		t.Errorf("got %q after the context ended", got)
	}
}

// TestStreamWithoutReadersAllocatesOnlyItself: a start nobody follows
// publishes its usual events into the room a new Stream has, making no
// channel per event.
func TestStreamWithoutReadersAllocatesOnlyItself(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		st := NewStream()
		for range streamEvents - 1 {
			st.Publish(ProgressEvent{Message: "step"})
		}
		st.Publish(ProgressEvent{Message: "ready", Ready: true})
	})
	if allocs > 2 { // the Stream and its events
		t.Errorf("a stream of %d events without readers made %.0f allocations, want at most 2", streamEvents, allocs)
	}
}
