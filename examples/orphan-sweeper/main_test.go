package main

import (
	"bytes"
	"context"
	"encoding/json"
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

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.APIServer}, &cluster)
}

func TestSweepFromFile(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sweep-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "stray"} {
		_, err := c.Client.CoreV1().Pods(ns.Name).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user, Labels: map[string]string{"app.kubernetes.io/managed-by": "spawnkit"},
				Annotations: map[string]string{naming.AnnotationUsername: user}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	known := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(known, []byte(`[{"user": "alice", "server": "", "running": true}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", c.Kubeconfig, "--known", known, "--namespaces", ns.Name, "--min-age", "0"}

	var out bytes.Buffer
	if err := run(ctx, args, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("dry run:\n%s", out.String())
	if !strings.Contains(out.String(), "jupyter-stray") || !strings.Contains(out.String(), "kept: dry run") || strings.Contains(out.String(), "jupyter-alice") {
		t.Errorf("dry run output:\n%s", out.String())
	}
	if _, err := c.Client.CoreV1().Pods(ns.Name).Get(ctx, "jupyter-stray", metav1.GetOptions{}); err != nil {
		t.Fatalf("a dry run deleted: %v", err)
	}
	out.Reset()
	if err := run(ctx, append(args, "--apply", "--json"), &out); err != nil {
		t.Fatal(err)
	}
	var result struct {
		Report struct{ Deleted []struct{ Name string } }
	}
	if err := json.Unmarshal(out.Bytes(), &result); err != nil || len(result.Report.Deleted) != 1 || result.Report.Deleted[0].Name != "jupyter-stray" {
		t.Errorf("--apply --json: %v\n%s", err, out.String())
	}
}

func TestKnownFromHub(t *testing.T) {
	pages := []string{
		`{"items": [{"name": "alice", "servers": {"": {"stopped": false}, "gpu": {"stopped": true}}}], "_pagination": {"offset": 0, "limit": 1, "total": 2, "next": {"offset": 1, "limit": 1}}}`,
		`{"items": [{"name": "bob", "servers": {}}], "_pagination": {"offset": 1, "limit": 1, "total": 2, "next": null}}`,
	}
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "token secret" || r.URL.Query().Get("include_stopped_servers") != "1" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.URL.Query().Get("offset") == "1" {
			w.Write([]byte(pages[1]))
			return
		}
		w.Write([]byte(pages[0]))
	}))
	defer hub.Close()
	known, err := knownFromHub(context.Background(), hub.URL, "secret")
	if err != nil {
		t.Fatal(err)
	}
	if known.Len() != 3 {
		t.Errorf("%d servers, want alice's two and bob's placeholder", known.Len())
	}
	if _, err := knownFromHub(context.Background(), hub.URL, "wrong"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("bad token: %v", err)
	}
}

// TestSweepKubeSpawnerSelector: objects KubeSpawner made (managed-by=
// kubespawner, the same owner annotations) are not looked at by default
// and are attributed with --selector naming both managers.
func TestSweepKubeSpawnerSelector(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sweep-ks-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "stray"} {
		_, err := c.Client.CoreV1().Pods(ns.Name).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user,
				Labels:      map[string]string{"app.kubernetes.io/managed-by": "kubespawner", "component": "singleuser-server"},
				Annotations: map[string]string{naming.AnnotationUsername: user}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	known := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(known, []byte(`[{"user": "alice", "server": "", "running": true}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", c.Kubeconfig, "--known", known, "--namespaces", ns.Name, "--min-age", "0"}
	for _, tc := range []struct {
		name  string
		flags []string
		stray bool
	}{
		{"default selector", nil, false},
		{"both managers", []string{"--selector", "app.kubernetes.io/managed-by in (spawnkit,kubespawner)"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(ctx, append(args, tc.flags...), &out); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(out.String(), "jupyter-stray"); got != tc.stray || strings.Contains(out.String(), "jupyter-alice") {
				t.Errorf("stray listed = %v, want %v (alice never):\n%s", got, tc.stray, out.String())
			}
		})
	}
}
