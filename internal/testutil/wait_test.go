package testutil

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	start := time.Now()
	Eventually(t, 5*time.Second, "the third call", func() error {
		if calls.Add(1) < 3 {
			return errors.New("too early")
		}
		return nil
	})
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("took %s for three 20 ms polls", el)
	}
}

// fakeTB records a Fatalf instead of ending the test goroutine.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyFailsNamingWhatItSaw(t *testing.T) {
	f := &fakeTB{TB: t}
	Eventually(f, 100*time.Millisecond, "the pod to run", True(func() bool { return false }))
	if f.msg == "" {
		t.Fatal("Eventually did not fail on a condition that never held")
	}
	for _, want := range []string{"the pod to run", "not yet", "100ms"} {
		if !strings.Contains(f.msg, want) {
			t.Fatalf("failure %q does not say %q", f.msg, want)
		}
	}
}
