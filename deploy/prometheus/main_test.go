// Package prometheus holds the tests of the shipped Prometheus rules:
// rules.yaml passes `promtool check rules` and its unit tests
// (rules_test.yaml, through `promtool test rules`); every alert carries
// the labels and annotations an on-call engineer needs, a runbook section
// in runbooks.md, and a firing and a non-firing test case; and
// prometheusrule.yaml is rules.yaml wrapped for the Prometheus Operator.
//
// promtool comes with Debian's prometheus package
// (internal/tools/prereqs.sh installs it); without it the promtool tests
// skip, or fail under CI=true.
package prometheus

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
