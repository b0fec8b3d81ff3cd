package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	trimmed := write("trimmed", "  \tfile-token\n\n")
	blank := write("blank", " \n")
	cases := []struct {
		name, file, env string
		want            string
		wantErr         string
	}{
		{"file trimmed", trimmed, "", "file-token", ""},
		{"file wins over env", trimmed, "env-token", "file-token", ""},
		{"env", "", " env-token\n", "env-token", ""},
		{"none", "", "", "", "no API token"},
		{"blank env", "", "  ", "", "no API token"},
		{"blank file", blank, "env-token", "", "is empty"},
		{"missing file", filepath.Join(dir, "missing"), "env-token", "", "reading the token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == tokenEnv {
					return c.env
				}
				return ""
			}
			got, err := loadToken(c.file, getenv)
			if got != c.want || (err == nil) != (c.wantErr == "") || err != nil && !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("loadToken = %q, %v; want %q, error containing %q", got, err, c.want, c.wantErr)
			}
		})
	}
}

// TestRunRefusesWithoutToken: no token, no start (and no cluster call).
func TestRunRefusesWithoutToken(t *testing.T) {
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"-listen", "127.0.0.1:0"}, func(string) string { return "" }, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no API token") {
		t.Errorf("run without a token = %v, want a refusal naming the token", err)
	}
}

// TestHelpShowsOnlyOwnFlags: -h lists exactly the command's flags (a flag
// added without a test, or a test binary's flag leaking in, fails it),
// with the API's default address and the token's variable.
func TestHelpShowsOnlyOwnFlags(t *testing.T) {
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"-h"}, func(string) string { return "" }, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -h = %v, want flag.ErrHelp", err)
	}
	out := stderr.String()
	want := []string{
		"-kubeconfig", "-config", "-hub-policy", "-listen", "-probe-listen", "-token-file", "-tls-cert-file", "-tls-key-file",
		"-leader-elect", "-adopt-kubespawner", "-leader-elect-namespace", "-leader-elect-name", "-leader-elect-identity",
		"-leader-elect-lease-duration", "-leader-elect-renew-deadline", "-leader-elect-retry-period",
		"-reload-interval", "-kube-api-qps", "-kube-api-burst", "-concurrent-spawn-limit", "-clusters", "-trace-hash-names", "-v", "-check", "-version",
	}
	// flag.PrintDefaults starts each flag's entry with "  -name" and
	// its type, if any, after a space.
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(l, "  -"); ok {
			name, _, _ = strings.Cut(name, " ")
			got = append(got, "-"+name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("help lists the flags %q, want %q:\n%s", got, want, out)
	}
	for _, s := range []string{"127.0.0.1:8765", tokenEnv} {
		if !strings.Contains(out, s) {
			t.Errorf("help lacks %s:\n%s", s, out)
		}
	}
	if err := run(t.Context(), []string{"stray"}, func(string) string { return "" }, &stderr); err == nil {
		t.Error("stray argument accepted")
	}
}

// TestVerbosity: -v sets the level logged (V(1) lines appear from -v 1
// on, never at the default), and a level below 0 or above maxVerbosity
// (where client-go logs request bodies, Secrets among them) is refused.
func TestVerbosity(t *testing.T) {
	for _, c := range []struct {
		args  []string
		want  int
		lines int // of the two logged below, one at V(0) and one at V(1)
	}{
		{nil, 0, 1},
		{[]string{"-v", "1"}, 1, 2},
		{[]string{"-v", strconv.Itoa(maxVerbosity)}, maxVerbosity, 2},
	} {
		f, err := parseFlags(c.args, func(string) string { return "" }, io.Discard)
		if err != nil || f.verbosity != c.want {
			t.Fatalf("parseFlags(%q) = -v %d, %v; want %d", c.args, f.verbosity, err, c.want)
		}
		var out bytes.Buffer
		log := newLogger(&out, f.verbosity)
		log.Info("at zero")
		log.V(1).Info("at one")
		if got := strings.Count(out.String(), "\n"); got != c.lines {
			t.Errorf("-v %d logged %d of a V(0) and a V(1) line, want %d:\n%s", f.verbosity, got, c.lines, out.String())
		}
	}
	for _, v := range []string{"-1", strconv.Itoa(maxVerbosity + 1), "10"} {
		if _, err := parseFlags([]string{"-v", v}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "-v "+v) {
			t.Errorf("-v %s: %v, want a refusal naming it", v, err)
		}
	}
}

// TestClientLimit: by default the service's client has no client-side
// rate limiter (the API server's priority and fairness protects it); a
// positive -kube-api-qps caps it with -kube-api-burst; 0, another
// negative number or a cap without a burst is refused with the flag's
// name, before anything is contacted.
func TestClientLimit(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		limited bool
		qps     float32
	}{
		{nil, false, 0},
		{[]string{"-kube-api-qps", "-1"}, false, 0},
		{[]string{"-kube-api-qps", "20", "-kube-api-burst", "40"}, true, 20},
	} {
		f, err := parseFlags(append([]string{"-kubeconfig", kubeconfig}, c.args...), func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatalf("parseFlags(%q): %v", c.args, err)
		}
		cfg, err := restConfig(f)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		limiter := cs.CoreV1().RESTClient().(*rest.RESTClient).GetRateLimiter()
		if (limiter != nil) != c.limited || c.limited && limiter.QPS() != c.qps {
			t.Errorf("%q: rate limiter %v; want limited %v at %g a second", c.args, limiter, c.limited, c.qps)
		}
	}
	for _, bad := range [][]string{
		{"-kube-api-qps", "0"},
		{"-kube-api-qps", "-5"},
		{"-kube-api-qps", "20", "-kube-api-burst", "0"},
	} {
		if _, err := parseFlags(bad, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "-kube-api-qps "+bad[1]) {
			t.Errorf("%q: %v; want a refusal naming -kube-api-qps", bad, err)
		}
	}
}
