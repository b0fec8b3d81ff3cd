package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/naming"
)

// TestRefusesToGuess: every bad --known file, flag or hub answer is an
// error naming the problem, and --apply --min-age 0 then deletes nothing.
func TestRefusesToGuess(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "refuse-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "bob", "stray1", "stray2"} {
		_, err := c.Client.CoreV1().Pods(ns.Name).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user, Labels: map[string]string{"app.kubernetes.io/managed-by": "spawnkit"},
				Annotations: map[string]string{naming.AnnotationUsername: user}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	pods := func() string {
		list, err := c.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		return fmt.Sprint(names)
	}
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "token fail":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "token object":
			w.Write([]byte(`{}`))
		case "token list":
			w.Write([]byte(`[]`))
		case "token noscope":
			w.Write([]byte(`{"items": [{"name": "alice"}], "_pagination": {"offset": 0, "total": 1, "next": null}}`))
		case "token vanished":
			w.Write([]byte(`{"items": [], "_pagination": {"offset": 0, "total": 5, "next": null}}`))
		case "token empty":
			w.Write([]byte(`{"items": [], "_pagination": {"offset": 0, "total": 0, "next": null}}`))
		case "token loop":
			w.Write([]byte(`{"items": [{"name": "alice", "servers": {}}], "_pagination": {"offset": 0, "total": 9, "next": {"offset": 0}}}`))
		case "token nullserver":
			w.Write([]byte(`{"items": [{"name": "alice", "servers": {"": null}}], "_pagination": {"offset": 0, "total": 1, "next": null}}`))
		default:
			w.Write([]byte(`not json`))
		}
	}))
	defer hub.Close()

	good := `[{"user": "alice", "server": "", "running": true}, {"user": "bob", "server": "", "running": true}]`
	for _, tc := range []struct {
		name  string
		known string // the --known file; "" uses the hub
		token string
		flags []string
		want  string // in the error
	}{
		{"null", "null", "", nil, "not null"},
		{"object", "{}", "", nil, "JSON list"},
		{"empty list", "[]", "", nil, "--allow-empty-known"},
		{"null entry", "[null]", "", nil, "entry 0 is null"},
		{"empty entry", "[{}]", "", nil, `no "user"`},
		{"misspelt key", `[{"user": "alice", "sever": "gpu", "running": true}]`, "", nil, `unknown field "sever"`},
		{"missing running", `[{"user": "alice", "server": ""}]`, "", nil, `no "running"`},
		{"wrong type", `[{"user": "alice", "running": "yes"}]`, "", nil, "entry 0"},
		{"duplicate", `[{"user": "alice", "running": true}, {"user": "alice", "running": false}]`, "", nil, "listed twice"},
		{"trailing data", good + " []", "", nil, "trailing data"},
		{"not JSON", "alice", "", nil, "JSON list"},
		{"unknown kind", good, "", []string{"--kinds", "Pods"}, `unknown kind "Pods"`},
		{"empty kinds", good, "", []string{"--kinds", ","}, "names no kind"},
		{"negative min-age", good, "", []string{"--min-age", "-1s"}, "negative"},
		{"bad selector", good, "", []string{"--selector", "managed-by in ("}, "--selector"},
		{"empty selector", good, "", []string{"--selector", " "}, "selects every object"},
		{"stray argument", good, "", []string{"true"}, "unexpected arguments"},
		{"over max-delete", good, "", []string{"--max-delete", "1"}, "more than --max-delete 1"},
		{"hub error", "", "fail", nil, "500"},
		{"hub object", "", "object", nil, "not a paginated user list"},
		{"hub list", "", "list", nil, "reading the hub's user list"},
		{"hub not JSON", "", "garbage", nil, "reading the hub's user list"},
		{"hub without read:servers", "", "noscope", nil, "read:servers"},
		{"hub lost its users", "", "vanished", nil, "reports 5 users but returned none"},
		{"hub with no users", "", "empty", nil, "--allow-empty-known"},
		{"hub pagination loop", "", "loop", nil, "does not advance"},
		{"hub null server", "", "nullserver", nil, "null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--kubeconfig", c.Kubeconfig, "--namespaces", ns.Name, "--min-age", "0", "--apply"}
			if tc.known != "" {
				path := filepath.Join(t.TempDir(), "known.json")
				if err := os.WriteFile(path, []byte(tc.known), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--known", path)
			} else {
				args = append(args, "--hub-url", hub.URL)
				t.Setenv("JUPYTERHUB_API_TOKEN", tc.token)
			}
			before := pods()
			var out bytes.Buffer
			err := run(ctx, append(args, tc.flags...), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q\n%s", err, tc.want, out.String())
			}
			if after := pods(); after != before {
				t.Errorf("pods %s before, %s after", before, after)
			}
		})
	}

	// --allow-empty-known accepts an empty hub, and --apply prints its
	// plan with the counts before deleting.
	path := filepath.Join(t.TempDir(), "known.json")
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"--kubeconfig", c.Kubeconfig, "--namespaces", ns.Name, "--min-age", "0", "--apply", "--known", path}, &out); err != nil {
		t.Fatal(err)
	}
	plan, _, _ := strings.Cut(out.String(), "KIND")
	if !strings.Contains(plan, "will delete 2 objects: 2 Pod") || !strings.Contains(plan, "jupyter-stray1") {
		t.Errorf("no plan before the table:\n%s", out.String())
	}
	if got := pods(); got != "[jupyter-alice jupyter-bob]" {
		t.Errorf("pods after --apply: %s", got)
	}
	emptyPath := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(emptyPath, []byte("[]"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"--kubeconfig", c.Kubeconfig, "--namespaces", ns.Name, "--known", emptyPath, "--allow-empty-known"}, &out); err != nil {
		t.Fatalf("--allow-empty-known: %v", err)
	}
}
