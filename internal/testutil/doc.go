// Package testutil is the one set of waiting helpers every package's tests
// use, and the fixtures the tests of several packages share (NewCert: a
// CA and a serving certificate; StartJaeger: a Jaeger v2 process that
// receives OTLP traces on 127.0.0.1 and reads them back). It is
// test-only: outside _test.go files only internal/benchreport, a program,
// imports it, to start Jaeger with LaunchJaeger.
//
// StartJaeger runs the binary internal/tools/jaeger.sh builds (make test
// builds it and passes its path as SPAWNKIT_JAEGER); without it the test
// is skipped, or fails when CI=true.
//
// Waits are positive: a helper returns as soon as its condition holds and
// fails the test, naming what it waited for and what it last saw, when the
// deadline passes or the test's context ends. A test that must show that
// something did not happen waits for a later signal that proves it (an
// event, a counter, a watch), and only where no signal exists sleeps, with
// a comment saying why.
package testutil
