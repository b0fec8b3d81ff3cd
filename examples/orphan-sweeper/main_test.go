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
	"k8s.io/apimachinery/pkg/api/resource"
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

// TestSweepOneOfSeveralClusters: run for cluster "b", a server the
// --known file places in cluster "a" leaves an orphan pod here (what a
// move leaves behind), named with where it lives, while its claim is
// kept; a server placed in b, or nowhere, owns its pod. A misspelt
// cluster name is refused before anything is listed.
func TestSweepOneOfSeveralClusters(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx := t.Context()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sweep-b-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managed := map[string]string{"app.kubernetes.io/managed-by": "spawnkit"}
	for _, user := range []string{"moved", "here", "anywhere"} {
		if _, err := c.Client.CoreV1().Pods(ns.Name).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "jupyter-" + user, Labels: managed, Annotations: map[string]string{naming.AnnotationUsername: user}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "notebook", Image: "x"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns.Name).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-moved", Labels: managed, Annotations: map[string]string{naming.AnnotationUsername: "moved"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	known := filepath.Join(t.TempDir(), "servers.json")
	if err := os.WriteFile(known, []byte(`[{"user": "moved", "server": "", "running": true, "cluster": "a"},
		{"user": "here", "server": "", "running": true, "cluster": "b"},
		{"user": "anywhere", "server": "", "running": true}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", c.Kubeconfig, "--known", known, "--namespaces", ns.Name, "--min-age", "0",
		"--kinds", "Pod,PersistentVolumeClaim", "--cluster", "b"}
	var out bytes.Buffer
	if err := run(ctx, append(args, "--apply", "--json"), &out); err != nil {
		t.Fatal(err)
	}
	var result struct {
		Orphans []struct{ Name, Reason, Cluster, ServerCluster string }
		Report  struct{ Deleted []struct{ Name string } }
	}
	if err := json.Unmarshal(out.Bytes(), &result); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(result.Orphans) != 1 || result.Orphans[0].Name != "jupyter-moved" || result.Orphans[0].Reason != "other-cluster" ||
		result.Orphans[0].Cluster != "b" || result.Orphans[0].ServerCluster != "a" {
		t.Errorf("orphans in b: %+v; want only jupyter-moved, other-cluster, listed in b, living in a", result.Orphans)
	}
	if len(result.Report.Deleted) != 1 || result.Report.Deleted[0].Name != "jupyter-moved" {
		t.Errorf("deleted: %+v; want jupyter-moved", result.Report.Deleted)
	}
	for _, name := range []string{"jupyter-here", "jupyter-anywhere"} {
		if _, err := c.Client.CoreV1().Pods(ns.Name).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims(ns.Name).Get(ctx, "claim-moved", metav1.GetOptions{}); err != nil {
		t.Errorf("the moved server's claim: %v", err)
	}
	for _, bad := range []struct{ flag, file, want string }{
		{"Gpu_EU", "", `--cluster "Gpu_EU"`},
		{"b", `[{"user": "x", "running": true, "cluster": "B A"}]`, `cluster "B A"`},
	} {
		args := []string{"--kubeconfig", c.Kubeconfig, "--known", known, "--cluster", bad.flag}
		if bad.file != "" {
			f := filepath.Join(t.TempDir(), "bad.json")
			if err := os.WriteFile(f, []byte(bad.file), 0o644); err != nil {
				t.Fatal(err)
			}
			args[3] = f
		}
		if err := run(ctx, args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: %v; want an error naming %s", args, err, bad.want)
		}
	}
}

func TestKnownFromHub(t *testing.T) {
	pages := []string{
		`{"items": [{"name": "alice", "servers": {"": {"stopped": false}, "gpu": {"stopped": true, "state": {"spawnkit_state": {"pod_name": "jupyter-alice--gpu", "cluster": "gpu-eu"}}}}}], "_pagination": {"offset": 0, "limit": 1, "total": 2, "next": {"offset": 1, "limit": 1}}}`,
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
