package prometheus

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

var updatePrometheusRule = flag.Bool("update-prometheusrule", false, "rewrite prometheusrule.yaml from rules.yaml")

const (
	rulesFile          = "rules.yaml"
	unitTestsFile      = "rules_test.yaml"
	runbooksFile       = "runbooks.md"
	prometheusRuleFile = "prometheusrule.yaml"

	// runbookBase is where the runbooks are published; each alert's
	// runbook_url is this plus "#" and the anchor of its section.
	runbookBase = "https://github.com/spawnkit/spawnkit/blob/main/deploy/prometheus/runbooks.md"
)

// ruleFile is a Prometheus rule file (and a PrometheusRule's spec), with
// the fields these tests read.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// unitTests is a promtool unit test file, the fields these tests read.
type unitTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			EvalTime  string `json:"eval_time"`
			// Empty or left out: the alert must not fire at EvalTime.
			ExpAlerts []json.RawMessage `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

func readYAML(t *testing.T, file string, v any) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return data
}

func alerts(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	readYAML(t, rulesFile, &f)
	var as []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				as = append(as, r)
			}
		}
	}
	if len(as) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	return as
}

// promtool returns promtool's path. Without it the test skips, except
// under CI=true, where a missing tool must not pass for a passing test.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool is not installed: Debian's prometheus package has it (apt-get install prometheus, as internal/tools/prereqs.sh does), or take it from a release at https://github.com/prometheus/prometheus/releases"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestPromtoolCheckRules: rules.yaml is a valid rule file.
func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
}

// TestPromtoolTestRules runs rules_test.yaml's unit tests.
func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", unitTestsFile)
}

// TestAlertsAreDocumented: every alert has a severity an Alertmanager
// can route on, a summary and a description, and a runbook_url whose
// section exists in runbooks.md; every section there is an alert's.
func TestAlertsAreDocumented(t *testing.T) {
	sections := runbookSections(t)
	names := map[string]bool{}
	for _, a := range alerts(t) {
		t.Run(a.Alert, func(t *testing.T) {
			if names[a.Alert] {
				t.Errorf("two alerts are named %s", a.Alert)
			}
			names[a.Alert] = true
			if s := a.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("label severity %q, want page or ticket", s)
			}
			for _, k := range []string{"summary", "description"} {
				if strings.TrimSpace(a.Annotations[k]) == "" {
					t.Errorf("no annotation %s", k)
				}
			}
			want := runbookBase + "#" + anchor(a.Alert)
			if got := a.Annotations["runbook_url"]; got != want {
				t.Errorf("runbook_url %q, want %q", got, want)
			}
			if !slices.Contains(sections, a.Alert) {
				t.Errorf("%s has no section \"## %s\"", runbooksFile, a.Alert)
			}
		})
	}
	for _, s := range sections {
		if !names[s] {
			t.Errorf("%s has a section %q, which is no alert of %s", runbooksFile, s, rulesFile)
		}
	}
}

// TestAlertsAreTested: every alert has a test case in rules_test.yaml in
// which it fires and one in which it does not, and every case names an
// alert that exists (promtool passes a case of an unknown alert that
// expects nothing).
func TestAlertsAreTested(t *testing.T) {
	var u unitTests
	readYAML(t, unitTestsFile, &u)
	if !slices.Equal(u.RuleFiles, []string{rulesFile}) {
		t.Errorf("%s tests the rule files %q, want [%s]", unitTestsFile, u.RuleFiles, rulesFile)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range u.Tests {
		for _, c := range tc.AlertRuleTest {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname]++
			} else {
				silent[c.Alertname]++
			}
		}
	}
	known := map[string]bool{}
	for _, a := range alerts(t) {
		known[a.Alert] = true
		if fires[a.Alert] == 0 {
			t.Errorf("%s: no case in %s in which it fires", a.Alert, unitTestsFile)
		}
		if silent[a.Alert] == 0 {
			t.Errorf("%s: no case in %s in which it does not fire (exp_alerts: [])", a.Alert, unitTestsFile)
		}
	}
	for _, m := range []map[string]int{fires, silent} {
		for name := range m {
			if !known[name] {
				t.Errorf("%s tests alert %q, which %s does not have", unitTestsFile, name, rulesFile)
			}
		}
	}
}

// TestPrometheusRule keeps prometheusrule.yaml equal to rules.yaml under
// a PrometheusRule's spec. Rewrite it with
// go test ./deploy/prometheus -run TestPrometheusRule -update-prometheusrule.
func TestPrometheusRule(t *testing.T) {
	var rules ruleFile
	want := prometheusRule(readYAML(t, rulesFile, &rules))
	if *updatePrometheusRule {
		if err := os.WriteFile(prometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var pr struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Spec       ruleFile `json:"spec"`
	}
	got := readYAML(t, prometheusRuleFile, &pr)
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not rules.yaml's PrometheusRule; rewrite it: go test ./deploy/prometheus -run TestPrometheusRule -update-prometheusrule", prometheusRuleFile)
	}
	// The indentation keeps every value: a guard on prometheusRule.
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s is a %s %s", prometheusRuleFile, pr.APIVersion, pr.Kind)
	}
	if !reflect.DeepEqual(pr.Spec, rules) {
		t.Errorf("%s's spec differs from %s", prometheusRuleFile, rulesFile)
	}
}

// prometheusRule wraps a rule file in a PrometheusRule: a PrometheusRule's
// spec is a rule file, so indenting every line (comments and block
// scalars too) under spec keeps its meaning.
func prometheusRule(rules []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`# PrometheusRule spawnkit-service for the Prometheus Operator: rules.yaml
# under spec. Generated from rules.yaml, so edit that file and run
#   go test ./deploy/prometheus -run TestPrometheusRule -update-prometheusrule
# An Operator that selects rules by label (its ruleSelector) needs that
# label here too: add it in an overlay.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: spawnkit-service
  labels:
    app.kubernetes.io/name: spawnkit-service
    app.kubernetes.io/component: spawner
spec:
`)
	for line := range strings.Lines(string(rules)) {
		if strings.TrimSpace(line) != "" {
			b.WriteString("  ")
		}
		b.WriteString(line)
	}
	return b.Bytes()
}

// runbookSections returns the headings of runbooks.md's "## " sections.
func runbookSections(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hs []string
	inCode := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if h, ok := strings.CutPrefix(line, "## "); ok && !inCode {
			hs = append(hs, strings.TrimSpace(h))
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return hs
}

// anchor is the fragment GitHub gives a Markdown heading: lower case,
// spaces to hyphens, other punctuation but hyphens and underscores
// dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
