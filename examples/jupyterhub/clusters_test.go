package jupyterhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

// TestJupyterHubSecondCluster runs the real JupyterHub against a
// spawner-service with two clusters (-clusters): the test's usual one,
// "a", and a second simulated cluster, "b", whose pods also get loopback
// IPs the hub's proxy reaches (a flat network). A profile places a
// server in b; JupyterHub starts, routes to, polls and stops it as any
// other, and stores its cluster in the server's state. With b's API
// server stopped, JupyterHub keeps b's server (its polls say running),
// starts servers in a, and a start placed on b fails at once naming the
// cluster; when b is back its server answers again, the same pod.
func TestJupyterHubSecondCluster(t *testing.T) {
	tl := requireTools(t)
	a := testcluster.Require(t, cluster)
	ctx := t.Context()
	b := testcluster.StartSecond(t, a, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1, Responders: true})

	dir := t.TempDir()
	config := filepath.Join(dir, "spawner-service.yaml")
	writeRemoteProfile(t, config)
	clusters := filepath.Join(dir, "clusters.yaml")
	if err := os.WriteFile(clusters, fmt.Appendf(nil, "clusters:\n- name: a\n  kubeconfig: %s\n- name: b\n  kubeconfig: %s\n", a.Kubeconfig, b.Kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, tl, a, stackOptions{serviceConfig: config, clusters: clusters})
	users := []string{"gina", "harry", "ivan", "judy"}
	// Whatever happens, no pod of these users is left in cluster a for
	// the tests after this one (they share it, and its namespace).
	t.Cleanup(func() { deleteUserPods(t, a, users) })
	for _, u := range users {
		s.createUser(ctx, t, u)
	}

	// gina in b (profile remote), harry in a (the default).
	s.startServer(ctx, t, "gina", "", map[string]string{"profile": "remote"})
	s.startServer(ctx, t, "harry", "", map[string]string{"profile": "default"})
	s.waitServer(ctx, t, "gina", "", 90*time.Second, "ready", ready)
	s.waitServer(ctx, t, "harry", "", 90*time.Second, "ready", ready)
	ginaPod := onePodIn(ctx, t, b, "gina")
	if ginaPod.Labels[naming.LabelCluster] != "b" {
		t.Errorf("gina's pod %s: label %s=%q, want b", ginaPod.Name, naming.LabelCluster, ginaPod.Labels[naming.LabelCluster])
	}
	if pods, err := s.podsOf(ctx, "gina", ""); err != nil || len(pods) != 0 {
		t.Errorf("gina has %d pods in cluster a (%v), want none", len(pods), err)
	}
	if harry := s.onePod(ctx, t, "harry", ""); harry.Labels[naming.LabelCluster] != "a" {
		t.Errorf("harry's pod %s: label %s=%q, want a", harry.Name, naming.LabelCluster, harry.Labels[naming.LabelCluster])
	}
	answer, err := s.viaProxy(ctx, userURL("gina", ""))
	if err != nil || answer.Pod != ginaPod.Name {
		t.Fatalf("gina through the proxy: %+v, %v; want an answer from pod %s in cluster b", answer, err, ginaPod.Name)
	}
	all, err := s.servers(ctx, "gina")
	if err != nil {
		t.Fatal(err)
	}
	if got := stateCluster(all[""].State); got != "b" {
		t.Errorf("the hub's state of gina's server names cluster %q, want b: %v", got, all[""].State)
	}

	// b's API server stops.
	if err := b.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 60*time.Second, "gina unknown in the service while b is down", func() error {
		st, err := s.serviceStatus(ctx, "gina")
		if err != nil || st.Phase != "unknown" || st.Reason != "ClusterUnavailable" {
			return fmt.Errorf("gina in the service: %+v, %v; want unknown, ClusterUnavailable", st, err)
		}
		return nil
	})
	// JupyterHub polls (poll_interval 1 s) and keeps the server.
	s.waitPolls(t, [][2]string{{"gina", ""}}, 3)
	s.waitServer(ctx, t, "gina", "", time.Second, "still ready while b is down", ready)
	// a serves: ivan starts there.
	s.startServer(ctx, t, "ivan", "", map[string]string{"profile": "default"})
	s.waitServer(ctx, t, "ivan", "", 90*time.Second, "ready while b is down", ready)
	// A start on b fails at once, naming it.
	began := time.Now()
	s.mustAPI(ctx, t, http.MethodPost, serverPath("judy", ""), map[string]string{"profile": "remote"},
		http.StatusCreated, http.StatusAccepted, http.StatusInternalServerError)
	s.waitServer(ctx, t, "judy", "", 30*time.Second, "gone (its start refused)", gone)
	t.Logf("a start on b while it was down ended in %s", time.Since(began).Round(time.Millisecond))
	if !logContains(s.logPath("jupyterhub"), `cluster "b" is unavailable`) {
		t.Errorf("JupyterHub's log does not say cluster b is unavailable:\n%s", logTail(s.logPath("jupyterhub"), 40))
	}

	// b is back: gina answers again, from the same pod.
	if err := b.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyEvery(t, 200*time.Millisecond, 60*time.Second, "gina running in the service after b is back", func() error {
		st, err := s.serviceStatus(ctx, "gina")
		if err != nil || st.Phase != "running" {
			return fmt.Errorf("gina in the service after b is back: %+v, %v", st, err)
		}
		return nil
	})
	if again := onePodIn(ctx, t, b, "gina"); again.UID != ginaPod.UID {
		t.Errorf("gina's pod was replaced: UID %s, was %s", again.UID, ginaPod.UID)
	}
	if answer, err := s.viaProxy(ctx, userURL("gina", "")); err != nil || answer.Pod != ginaPod.Name {
		t.Errorf("gina through the proxy after b is back: %+v, %v", answer, err)
	}

	// JupyterHub stops them, gina in b and ivan in a; the tests after
	// this one share cluster a and its namespace.
	for _, u := range []struct {
		user string
		c    *testcluster.Cluster
		name string
	}{{"gina", b, "b"}, {"ivan", a, "a"}} {
		s.mustAPI(ctx, t, http.MethodDelete, serverPath(u.user, ""), nil, http.StatusNoContent, http.StatusAccepted)
		s.waitServer(ctx, t, u.user, "", 60*time.Second, "gone", gone)
		testutil.EventuallyEvery(t, 200*time.Millisecond, 30*time.Second, u.user+"'s pods gone from cluster "+u.name, func() error {
			if pods := podsIn(ctx, t, u.c, u.user); len(pods) != 0 {
				return fmt.Errorf("%s still has %d pods in cluster %s", u.user, len(pods), u.name)
			}
			return nil
		})
	}
}

// writeRemoteProfile writes testdata/spawner-service.yaml with one more
// profile, "remote", whose kubernetes_cluster is b.
func writeRemoteProfile(t *testing.T, file string) {
	t.Helper()
	writeServiceConfig(t, file, func(cfg map[string]any) {
		profiles, ok := cfg["profile_list"].([]any)
		if !ok {
			t.Fatalf("testdata/spawner-service.yaml has no profile_list")
		}
		cfg["profile_list"] = append(profiles, map[string]any{
			"display_name": "Remote", "slug": "remote", "description": "In the second cluster.",
			"kubespawner_override": map[string]any{"kubernetes_cluster": "b"},
		})
	})
}

// stateCluster is the cluster in the spawnkit state the hub stored.
func stateCluster(state map[string]any) string {
	sk, _ := state["spawnkit_state"].(map[string]any)
	c, _ := sk["cluster"].(string)
	return c
}

// serviceStatus is the spawner-service's status of a user's default
// server.
type serviceStatusReply struct {
	Phase, Reason, Cluster string
}

func (s *stack) serviceStatus(ctx context.Context, user string) (serviceStatusReply, error) {
	var st serviceStatusReply
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.serviceURL()+"/v1/users/"+user+"/server", nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+s.serviceToken)
	resp, err := s.serviceClient().Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET status of %s: %s", user, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func podsIn(ctx context.Context, t *testing.T, c *testcluster.Cluster, user string) []corev1.Pod {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.Annotations[naming.AnnotationUsername] == user {
			pods = append(pods, p)
		}
	}
	return pods
}

func onePodIn(ctx context.Context, t *testing.T, c *testcluster.Cluster, user string) corev1.Pod {
	t.Helper()
	pods := podsIn(ctx, t, c, user)
	if len(pods) != 1 {
		names := make([]string, len(pods))
		for i, p := range pods {
			names[i] = p.Name
		}
		t.Fatalf("%s has %d pods in the second cluster (%s), want 1", user, len(pods), strings.Join(names, ", "))
	}
	return pods[0]
}

// deleteUserPods deletes the pods of users in c's namespace and waits
// until they are gone.
func deleteUserPods(t *testing.T, c *testcluster.Cluster, users []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var left []corev1.Pod
	for _, u := range users {
		for _, p := range podsIn(ctx, t, c, u) {
			if err := c.Client.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting pod %s: %v", p.Name, err)
			}
			left = append(left, p)
		}
	}
	for _, p := range left {
		if _, err := c.WaitForPod(ctx, namespace, p.Name, testcluster.PodGone); err != nil {
			t.Errorf("pod %s still there after a minute: %v", p.Name, err)
			return
		}
	}
}
