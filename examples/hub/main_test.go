package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

var cluster *testcluster.Cluster

func TestMain(m *testing.M) {
	testcluster.Main(m, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1}, &cluster)
}

// TestHubAPI drives the API end to end: start, follow progress, status,
// list, stop.
func TestHubAPI(t *testing.T) {
	c := testcluster.Require(t, cluster)
	registry, err := reflector.New(reflector.Options{Client: c.Client})
	if err != nil {
		t.Fatal(err)
	}
	manager, err := spawner.NewManager(spawner.ManagerOptions{Client: c.Client, Registry: registry,
		Config: spawner.Config{Namespace: "default", Pod: manifest.PodSpec{Image: "quay.io/jupyter/base-notebook"}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, manager) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + ln.Addr().String()

	do := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := do("POST", "/users/alice/servers/lab", ""); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("start: %s", resp.Status)
	}
	resp := do("GET", "/users/alice/servers/lab/progress", "")
	var last map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = nil
			if err := json.Unmarshal([]byte(data), &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp.Body.Close()
	if last == nil || last["ready"] != true || !strings.HasPrefix(last["url"].(string), "http://") {
		t.Fatalf("progress ended on %v, want ready with a URL", last)
	}
	var status map[string]any
	resp = do("GET", "/users/alice/servers/lab", "")
	_ = json.NewDecoder(resp.Body).Decode(&status)
	resp.Body.Close()
	if status["phase"] != "running" || status["pod"] != "jupyter-alice--lab" {
		t.Errorf("status = %v", status)
	}
	if resp := do("GET", "/users/nobody/server", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown server: %s", resp.Status)
	}
	if resp := do("POST", "/users/bob/server", `{"profile": 3}`); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed options: %s", resp.Status)
	}
	if resp := do("DELETE", "/users/alice/servers/lab", ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("stop: %s", resp.Status)
	}
	var list []map[string]any
	resp = do("GET", "/servers", "")
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list) != 1 || list[0]["phase"] != "stopped" {
		t.Errorf("servers = %v", list)
	}
}
