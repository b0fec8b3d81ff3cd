package retry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFlaky = errors.New("flaky")

func TestRetriesUntilSuccess(t *testing.T) {
	calls := 0
	err := Do(t.Context(), Options{Initial: time.Millisecond, MaxElapsed: time.Second}, func(context.Context) error {
		calls++
		if calls < 3 {
			return errFlaky
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err = %v after %d calls, want success on the third", err, calls)
	}
}

func TestStopsOnNonRetryable(t *testing.T) {
	calls := 0
	errFatal := errors.New("fatal")
	err := Do(t.Context(), Options{Initial: time.Millisecond, MaxElapsed: time.Second,
		Retryable: func(err error) bool { return errors.Is(err, errFlaky) }}, func(context.Context) error {
		calls++
		return errFatal
	})
	if !errors.Is(err, errFatal) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want the fatal error after one", err, calls)
	}
	calls = 0
	err = Do(t.Context(), Options{Initial: time.Millisecond, MaxElapsed: time.Second}, func(context.Context) error {
		calls++
		return Permanent(errFatal)
	})
	if !errors.Is(err, errFatal) || calls != 1 {
		t.Fatalf("Permanent: err = %v after %d calls", err, calls)
	}
}

func TestGivesUpAfterMaxElapsed(t *testing.T) {
	start := time.Now()
	calls := 0
	err := Do(t.Context(), Options{Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond, MaxElapsed: 100 * time.Millisecond}, func(context.Context) error {
		calls++
		return errFlaky
	})
	if !errors.Is(err, errFlaky) || calls < 2 || !strings.Contains(err.Error(), "tries") {
		t.Fatalf("err = %v after %d calls, want the last error with the try count", err, calls)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("took %s, bound was 100ms", elapsed)
	}
}

func TestStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := Do(ctx, Options{Initial: time.Millisecond, MaxElapsed: time.Minute}, func(context.Context) error {
		calls++
		cancel()
		return errFlaky
	})
	if !errors.Is(err, errFlaky) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want one call", err, calls)
	}
}

func TestRequiresMaxElapsed(t *testing.T) {
	if err := Do(t.Context(), Options{}, func(context.Context) error { return nil }); err == nil {
		t.Fatal("Do without MaxElapsed ran")
	}
}

func TestContextEndsDuringTheWait(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	err := Do(ctx, Options{Initial: 10 * time.Second, Max: 10 * time.Second, MaxElapsed: time.Minute}, func(context.Context) error {
		calls++
		return errFlaky
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want the context's error after one call", err, calls)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("waited %s after the context ended", elapsed)
	}
}

// TestElapsedCountsTheFirstTry: the budget starts before the first try,
// so a first try slower than MaxElapsed is not tried again.
func TestElapsedCountsTheFirstTry(t *testing.T) {
	calls := 0
	err := Do(t.Context(), Options{Initial: time.Millisecond, Max: time.Millisecond, MaxElapsed: 100 * time.Millisecond}, func(context.Context) error {
		calls++
		// The slow try itself: retry has no clock to step, and the
		// budget it must use up is wall time.
		time.Sleep(150 * time.Millisecond)
		return errFlaky
	})
	if !errors.Is(err, errFlaky) || calls != 1 {
		t.Fatalf("err = %v after %d calls, want the error after one slow call", err, calls)
	}
}

// TestDoAfterContinuesAsDo: after a first try made by the caller, the
// tries go on as Do's would (retryable errors retried, the count
// including the caller's try); a final first error is returned at once.
func TestDoAfterContinuesAsDo(t *testing.T) {
	opts := Options{Initial: time.Millisecond, MaxElapsed: time.Second, Retryable: func(err error) bool { return errors.Is(err, errFlaky) }}
	calls := 0
	err := DoAfter(t.Context(), opts, func(context.Context) error {
		calls++
		if calls < 2 {
			return errFlaky
		}
		return nil
	}, time.Now(), errFlaky)
	if err != nil || calls != 2 {
		t.Fatalf("err = %v after %d more calls, want success on the second", err, calls)
	}
	calls = 0
	errFatal := errors.New("fatal")
	err = DoAfter(t.Context(), opts, func(context.Context) error { calls++; return nil }, time.Now(), errFatal)
	if !errors.Is(err, errFatal) || calls != 0 {
		t.Fatalf("err = %v after %d calls, want the final first error and no call", err, calls)
	}
	err = DoAfter(t.Context(), opts, func(context.Context) error { calls++; return errFlaky }, time.Now().Add(-time.Hour), errFlaky)
	if !errors.Is(err, errFlaky) || calls != 0 {
		t.Fatalf("err = %v after %d calls, want no call once the budget is spent", err, calls)
	}
	if err := DoAfter(t.Context(), opts, nil, time.Now(), nil); err != nil {
		t.Fatalf("DoAfter after a successful first try = %v", err)
	}
}
