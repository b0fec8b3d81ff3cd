package service

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
)

// TestBadNamesInPath: a user or server name no hub can have is 400 on
// every endpoint, and the backend never sees it.
func TestBadNamesInPath(t *testing.T) {
	ta := newTestAPI(t, time.Hour)
	for _, name := range []struct{ label, user, server string }{
		{"NUL in user", "a%00b", ""},
		{"invalid UTF-8 user", "a%ffb", ""},
		{"truncated UTF-8 user", "%c3", ""},
		{"NUL in server", "alice", "x%00"},
		{"invalid UTF-8 server", "alice", "%fe%ff"},
	} {
		base := "/v1/users/" + name.user + "/server"
		if name.server != "" {
			base = "/v1/users/" + name.user + "/servers/" + name.server
		}
		for _, r := range []struct{ method, path, body string }{
			{"POST", base, "{}"}, {"GET", base, ""}, {"DELETE", base, ""}, {"GET", base + "/progress", ""},
		} {
			t.Run(name.label+"/"+r.method+" "+r.path, func(t *testing.T) {
				resp, data := ta.do(t, r.method, r.path, r.body, malformed())
				wantError(t, resp, data, http.StatusBadRequest, reasonBadRequest)
				if !strings.Contains(string(data), "name") {
					t.Errorf("error body %s does not say which name", data)
				}
			})
		}
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/users/alice/server", `{"env": {"A=B": "x"}}`},
		{"POST", "/v1/users/alice/server", `{"env": {"A\u0000": "x"}}`},
		{"GET", "/v1/users/a%00/options-form", ""},
		{"POST", "/v1/users/%ff/options-from-form", "{}"},
	} {
		resp, data := ta.do(t, r.method, r.path, r.body, malformed())
		wantError(t, resp, data, http.StatusBadRequest, reasonBadRequest)
	}
	if n := len(ta.fake.spawns); n != 0 {
		t.Errorf("the backend saw %d spawns", n)
	}
}

// TestManagerErrorsMapToStatus: what a caller's input causes is a 4xx
// with the reason, not a 500.
func TestManagerErrorsMapToStatus(t *testing.T) {
	// A bad option is a *ConfigError from kubespawner.Load itself.
	_, planErr := kubespawner.Load([]byte("image: x\nport: 70000"))
	if planErr == nil {
		t.Fatal("port 70000 loaded")
	}
	escape, err := naming.New(naming.Options{Scheme: naming.SchemeEscape})
	if err != nil {
		t.Fatal(err)
	}
	_, longErr := escape.Names(naming.Server{Username: strings.Repeat("é", 40)})
	profiles, err := kubespawner.Load([]byte(`
image: x
profile_list:
- display_name: A
  profile_options:
    mem:
      display_name: Memory
      unlisted_choice: {enabled: true, kubespawner_override: {mem_limit: "{value}"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, qtyErr := profiles.Resolve(t.Context(), map[string]string{"mem--unlisted-choice": "lots"})
	_, negErr := profiles.Resolve(t.Context(), map[string]string{"mem--unlisted-choice": "-1G"})
	for _, tc := range []struct {
		name   string
		err    error
		code   int
		reason string
	}{
		{"not found", fmt.Errorf("x: %w", manager.ErrNotFound), 404, reasonNotFound},
		{"invalid config", planErr, 400, reasonInvalidUserOptions},
		{"name too long under escape", longErr, 400, reasonBadRequest},
		{"unlisted quantity not a quantity", qtyErr, 400, reasonInvalidUserOptions},
		{"unlisted quantity negative", negErr, 400, reasonInvalidUserOptions},
		{"NUL name", naming.ValidateServer(naming.Server{Username: "\x00"}), 400, reasonBadRequest},
		{"cluster unavailable", fmt.Errorf("starting: %w", &manager.ClusterUnavailableError{Cluster: "gpu-eu", Since: time.Now()}), 503, reasonClusterUnavailable},
		{"no such cluster", fmt.Errorf("profile gpu: %w", manager.ErrNoSuchCluster), 400, reasonInvalidUserOptions},
		{"split brain", fmt.Errorf("carol: %w", manager.ErrSplitBrain), 409, reasonConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error to map")
			}
			var ae *apiError
			if !errors.As(managerError(tc.err), &ae) || ae.Status != tc.code || ae.Reason != tc.reason {
				t.Errorf("managerError(%v) = %v, want %d %s", tc.err, managerError(tc.err), tc.code, tc.reason)
			}
		})
	}
}

// TestE2EBadInputIs400: against a real Manager on the simulated cluster,
// a malformed unlisted quantity and a name too long under the escape
// scheme are 400 with the reason, and nothing is created.
func TestE2EBadInputIs400(t *testing.T) {
	e := newE2E(t)
	cfg := fmt.Sprintf(`namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
slug_scheme: escape
storage_pvc_ensure: true
storage_capacity: 1Gi
profile_list:
- display_name: Custom
  slug: custom
  profile_options:
    mem:
      display_name: Memory
      choices:
        small: {display_name: Small, kubespawner_override: {mem_limit: 1G}}
      unlisted_choice:
        enabled: true
        kubespawner_override: {mem_limit: "{value}"}
`, e.ns)
	if err := os.WriteFile(e.configFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := e.startService(t)
	count := func() string {
		pods, err1 := e.c.Client.CoreV1().Pods(e.ns).List(t.Context(), metav1.ListOptions{})
		pvcs, err2 := e.c.Client.CoreV1().PersistentVolumeClaims(e.ns).List(t.Context(), metav1.ListOptions{})
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d pods, %d claims", len(pods.Items), len(pvcs.Items))
	}
	before := count()
	long := "/v1/users/" + strings.Repeat("%C3%A9", 40) + "/server"
	for _, tc := range []struct {
		name, path, body, reason string
	}{
		{"not a quantity", "/v1/users/dave/server", `{"user_options": {"mem--unlisted-choice": "lots"}}`, reasonInvalidUserOptions},
		{"negative quantity", "/v1/users/dave/server", `{"user_options": {"mem--unlisted-choice": "-1G"}}`, reasonInvalidUserOptions},
		{"name too long under escape", long, `{}`, reasonBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, data := s.do(t, "POST", tc.path, tc.body)
			wantError(t, resp, data, http.StatusBadRequest, tc.reason)
		})
	}
	// The refused starts left no server: it is unknown everywhere.
	for _, r := range []struct{ method, path string }{
		{"DELETE", "/v1/users/dave/server"}, {"GET", "/v1/users/dave/server/progress"},
		{"DELETE", "/v1/users/nobody/servers/lab"}, {"GET", "/v1/users/nobody/servers/lab/progress"},
	} {
		resp, data := s.do(t, r.method, r.path, "")
		wantError(t, resp, data, http.StatusNotFound, reasonNotFound)
	}
	if after := count(); after != before {
		t.Errorf("%s before, %s after the refused starts", before, after)
	}
}
