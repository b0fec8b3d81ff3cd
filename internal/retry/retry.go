package retry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Options bound a retry loop. MaxElapsed is required: there is no
// unbounded retry in spawnkit.
type Options struct {
	// Initial is the first wait. Default: 100ms.
	Initial time.Duration
	// Max caps one wait. Default: 5s.
	Max time.Duration
	// MaxElapsed stops retrying once this much time has passed since the
	// first try.
	MaxElapsed time.Duration
	// Retryable says whether an error is worth another try. Default: every
	// error is. Wrap an error with Permanent to stop at once regardless.
	Retryable func(error) bool
}

// Permanent marks err as not worth retrying.
func Permanent(err error) error { return backoff.Permanent(err) }

// Do calls op until it succeeds, returns an error that is not retryable,
// ctx ends, or MaxElapsed has passed, waiting with exponential backoff and
// jitter in between. The error returned is op's last error (unwrapped from
// Permanent), with the number of tries when more than one was made. Each
// call builds its own BackOff, since a BackOff is not safe to share.
func Do(ctx context.Context, opts Options, op func(ctx context.Context) error) error {
	if opts.MaxElapsed <= 0 {
		return errors.New("retry: MaxElapsed must be positive")
	}
	// The loop is backoff.Retry's (backoff.WithContext around an
	// ExponentialBackOff), written out so that a first try that succeeds,
	// the usual case, builds no BackOff, timer or closure, and runs with
	// a small frame and three fewer under it: every API request of a
	// start goes through here, and its goroutine's stack keeps the size
	// of its deepest path.
	start := time.Now()
	err := try(ctx, opts, op)
	if err == nil {
		return nil
	}
	return again(ctx, opts, op, start, err)
}

// again is Do's loop after a first try that failed with err.
func again(ctx context.Context, opts Options, op func(ctx context.Context) error, start time.Time, err error) error {
	var b *backoff.ExponentialBackOff
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	tries := 1
	for {
		var perm *backoff.PermanentError
		if errors.As(err, &perm) {
			err = perm.Err
			break
		}
		if b == nil {
			// The elapsed time is counted from the first try, as
			// backoff.Retry counts it from its Reset.
			b = backoff.NewExponentialBackOff(
				backoff.WithInitialInterval(orDefault(opts.Initial, 100*time.Millisecond)),
				backoff.WithMaxInterval(orDefault(opts.Max, 5*time.Second)),
				backoff.WithMaxElapsedTime(0),
			)
		}
		next := b.NextBackOff()
		if ctx.Err() != nil || time.Since(start)+next > opts.MaxElapsed {
			if cerr := ctx.Err(); cerr != nil {
				err = cerr
			}
			break
		}
		if t == nil {
			t = time.NewTimer(next)
		} else {
			t.Reset(next)
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-t.C:
			tries++
			if err = try(ctx, opts, op); err == nil {
				return nil
			}
			continue
		}
		break
	}
	if tries > 1 {
		return fmt.Errorf("after %d tries: %w", tries, err)
	}
	return err
}

// DoAfter is Do for a caller that made the first try itself, begun at
// start and failed with err (nil: it succeeded, and DoAfter returns nil):
// the tries after it are Do's, with the same budget and backoff. A caller
// on a hot path uses it to keep Do's frames off the first try's stack.
func DoAfter(ctx context.Context, opts Options, op func(ctx context.Context) error, start time.Time, err error) error {
	if opts.MaxElapsed <= 0 {
		return errors.New("retry: MaxElapsed must be positive")
	}
	if err = classify(ctx, opts, err); err == nil {
		return nil
	}
	return again(ctx, opts, op, start, err)
}

// try runs op once and says whether its error is final (wrapped in
// backoff.Permanent) or worth another try.
func try(ctx context.Context, opts Options, op func(ctx context.Context) error) error {
	return classify(ctx, opts, op(ctx))
}

// classify wraps err in backoff.Permanent when it is final.
func classify(ctx context.Context, opts Options, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return backoff.Permanent(err)
	}
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return err
	}
	if opts.Retryable != nil && !opts.Retryable(err) {
		return backoff.Permanent(err)
	}
	return err
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
