// Package retry is spawnkit's single place for retries: exponential
// backoff with jitter (cenkalti/backoff/v4), always bounded by a context
// and a maximum elapsed time.
//
// Not yet implemented: this package is a placeholder in the module layout.
package retry
