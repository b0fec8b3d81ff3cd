package manager

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// notify never blocks, however far behind a reader is, and every
// status reaches every reader in order: the first through the channel's
// buffer, the rest through the watcher's queue. Statuses in the channel
// when the Manager stops are still read before it closes.
func TestWatchNeverBlocksAndKeepsOrder(t *testing.T) {
	m := &Manager{watchers: map[*watcher]struct{}{}}
	slow := m.Watch(t.Context())
	fast := m.Watch(t.Context())
	const n = 5 * watchBuffer
	got := make(chan []string, 1)
	go func() {
		var users []string
		for st := range fast {
			users = append(users, st.User)
		}
		got <- users
	}()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			m.notify(Status{User: fmt.Sprintf("u%03d", i)})
		}
	}()
	select {
	case <-sent:
	case <-time.After(30 * time.Second):
		t.Fatal("notify blocked on a reader that does not read")
	}
	m.closeWatchers()
	check := func(what string, users []string) {
		t.Helper()
		if len(users) != n {
			t.Fatalf("%s read %d statuses, want %d", what, len(users), n)
		}
		for i, u := range users {
			if want := fmt.Sprintf("u%03d", i); u != want {
				t.Fatalf("%s read %s at %d, want %s", what, u, i, want)
			}
		}
	}
	var users []string
	for st := range slow {
		users = append(users, st.User)
	}
	check("the slow reader", users)
	check("the fast reader", <-got)
}

// A reader whose ctx has ended gets at most what was already in the
// channel, the channel closes, and notify after that neither blocks nor
// sends on the closed channel.
func TestWatchEndsWithItsContext(t *testing.T) {
	m := &Manager{watchers: map[*watcher]struct{}{}}
	ctx, cancel := context.WithCancel(t.Context())
	w := m.Watch(ctx)
	m.notify(Status{User: "before"})
	if st := <-w; st.User != "before" {
		t.Fatalf("read %q", st.User)
	}
	cancel()
	deadline := time.After(30 * time.Second)
	for open := true; open; {
		m.notify(Status{User: "after"}) // must not panic on the closed channel
		select {
		case _, open = <-w:
		case <-deadline:
			t.Fatal("the channel did not close after ctx ended")
		}
	}
	for range 3 * watchBuffer {
		m.notify(Status{User: "later"})
	}
	m.mu.Lock()
	left := len(m.watchers)
	m.mu.Unlock()
	if left != 0 {
		t.Errorf("%d watchers left after their ctx ended", left)
	}
}
