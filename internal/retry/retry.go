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
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(orDefault(opts.Initial, 100*time.Millisecond)),
		backoff.WithMaxInterval(orDefault(opts.Max, 5*time.Second)),
		backoff.WithMaxElapsedTime(opts.MaxElapsed),
	)
	tries := 0
	err := backoff.Retry(func() error {
		tries++
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
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
	}, backoff.WithContext(b, ctx))
	if err == nil {
		return nil
	}
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		err = perm.Err
	}
	if tries > 1 {
		return fmt.Errorf("after %d tries: %w", tries, err)
	}
	return err
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
