// Package retry is spawnkit's single place for retries: exponential
// backoff with jitter (cenkalti/backoff/v4), always bounded by a context
// and an explicit maximum elapsed time, with a fresh BackOff per loop and
// the retry decision as a predicate. Do is safe for concurrent use.
package retry
