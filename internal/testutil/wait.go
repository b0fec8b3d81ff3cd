package testutil

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Eventually checks cond every 20 ms until it returns nil, and fails the
// test with what it waited for and cond's last error if that takes longer
// than d or the test's context ends first.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	EventuallyEvery(t, 20*time.Millisecond, d, what, cond)
}

// EventuallyEvery is Eventually with its own interval, for conditions that
// cost a request or a process to check.
func EventuallyEvery(t testing.TB, every, d time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), every, d, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		if last == nil {
			last = err
		}
		t.Fatalf("waited %s for %s; last saw: %v", d, what, last)
	}
}

// True adapts a boolean condition for Eventually.
func True(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

var errNotYet error = notYet{}
