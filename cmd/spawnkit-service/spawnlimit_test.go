package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// TestConcurrentSpawnLimit: -concurrent-spawn-limit defaults to the
// Manager's 100 and takes a positive bound or -1 (none); 0 (which the
// Manager would read as 100) and other negative numbers are refused,
// naming the flag and what to give instead.
func TestConcurrentSpawnLimit(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 100},
		{[]string{"-concurrent-spawn-limit", "1000"}, 1000},
		{[]string{"-concurrent-spawn-limit", "-1"}, -1},
	} {
		f, err := parseFlags(c.args, func(string) string { return "" }, io.Discard)
		if err != nil || f.spawnLimit != c.want {
			t.Errorf("parseFlags(%q) = %d, %v; want %d", c.args, f.spawnLimit, err, c.want)
		}
	}
	for _, bad := range []string{"0", "-2", "-100"} {
		_, err := parseFlags([]string{"-concurrent-spawn-limit", bad}, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-concurrent-spawn-limit "+bad) || !strings.Contains(err.Error(), "-1 for none") {
			t.Errorf("-concurrent-spawn-limit %s: %v; want a refusal naming the flag and -1", bad, err)
		}
	}
}

// TestConcurrentSpawnLimitReachesManager: the Manager the program makes
// holds -concurrent-spawn-limit: with 1, a second start waits behind a
// first that never gets ready, its progress saying so (with the default
// of 100 it would not wait).
func TestConcurrentSpawnLimitReachesManager(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ctx, cancel := context.WithTimeout(t.Context(), 2*clusterWait)
	defer cancel()
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spawnlimit-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns.Name, metav1.DeleteOptions{})
	})
	config := filepath.Join(t.TempDir(), "config.yaml")
	yaml := fmt.Sprintf("namespace: %s\nimage: quay.io/jupyter/base-notebook:2024-01-01\nextra_annotations: {%q: %q}\n",
		ns.Name, testcluster.BehaviorAnnotation, testcluster.BehaviorNeverReady)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == tokenEnv {
			return "token"
		}
		return ""
	}
	f, err := parseFlags([]string{"-kubeconfig", c.Kubeconfig, "-config", config, "-concurrent-spawn-limit", "1"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := prepare(f, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cs, release, err := p.newClusters(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	m, err := p.newManager(cs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Start(mctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	if err := m.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	first, second := naming.Server{Username: "limit-first"}, naming.Server{Username: "limit-second"}
	for _, s := range []naming.Server{first, second} {
		if _, started, err := m.Spawn(ctx, s, manager.SpawnOptions{}); err != nil || !started {
			t.Fatalf("Spawn %s: started %v, %v", s.Username, started, err)
		}
		defer func() {
			if _, err := m.Stop(context.WithoutCancel(ctx), s, spawner.StopOptions{Now: true}); err != nil {
				t.Errorf("Stop %s: %v", s.Username, err)
			}
		}()
	}
	const want = "Waiting for a start slot (1 starts in flight; position 1 in the queue)"
	testutil.Eventually(t, clusterWait, "the second start queued behind the first", func() error {
		ectx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		ch, err := m.Events(ectx, second)
		if err != nil {
			return err
		}
		var got []string
		for ev := range ch {
			if ev.Message == want {
				return nil
			}
			got = append(got, ev.Message)
		}
		return fmt.Errorf("progress %q lacks %q", got, want)
	})
}
