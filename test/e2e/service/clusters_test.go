package service

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/naming"
)

// clusterStatus is a status answer with its cluster.
type clusterStatus struct {
	Phase   string `json:"phase"`
	Ready   bool   `json:"ready"`
	URL     string `json:"url"`
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
	State   struct {
		PodName   string `json:"pod_name"`
		Namespace string `json:"namespace"`
		Cluster   string `json:"cluster"`
	} `json:"state"`
	ExitCode *int `json:"exit_code"`
}

func getStatus(t *testing.T, s *binService, token, user string) (int, clusterStatus, string) {
	t.Helper()
	r := binDo(t, httpClient(nil), http.MethodGet, "http://"+s.listen+serverPath(user), token)
	var st clusterStatus
	if r.code == http.StatusOK {
		if err := json.Unmarshal([]byte(r.body), &st); err != nil {
			t.Fatalf("status of %s: %v: %s", user, err, r.body)
		}
	}
	return r.code, st, r.body
}

// postProfile starts user's server with a profile through the API.
func postProfile(t *testing.T, s *binService, token, user, profile string) binReply {
	t.Helper()
	body := fmt.Sprintf(`{"user_options": {"profile": %q}}`, profile)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+s.listen+serverPath(user), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient(nil).Do(req)
	if err != nil {
		return binReply{body: err.Error()}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return binReply{code: resp.StatusCode, header: resp.Header, body: string(data)}
}

// TestBinarySeveralClusters runs the binary over two simulated clusters
// named in a -clusters file: a profile places a server in the second
// cluster, whose URL follows that cluster's kubespawner_override; status
// names each server's cluster; metrics carry the cluster label. With the
// second cluster's API server stopped, /readyz stays 200 and says which
// cluster is degraded, that cluster's server is "unknown" (exit_code
// null: the hub keeps it), a start placed there is 503
// ClusterUnavailable at once, and the first cluster starts and stops
// servers throughout; when the API server is back the server runs again
// with its pod untouched.
func TestBinarySeveralClusters(t *testing.T) {
	a := testcluster.Require(t, cluster)
	ctx := t.Context()
	b := testcluster.StartSecond(t, a, testcluster.Options{Level: testcluster.Lifecycle, Nodes: 1})
	const token = "clusters-test-token"
	e := newBinEnv(t, a, token)
	if _, err := b.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, e.config, fmt.Sprintf(`namespace: %s
image: quay.io/jupyter/base-notebook:2024-01-01
profile_list:
- {display_name: Default, slug: default, default: true}
- display_name: GPU
  slug: gpu
  kubespawner_override: {kubernetes_cluster: b}
- display_name: Anywhere
  slug: any
  kubespawner_override: {kubernetes_cluster: [b, a]}
`, e.ns))
	clustersFile := filepath.Join(t.TempDir(), "clusters.yaml")
	writeTestFile(t, clustersFile, fmt.Sprintf(`clusters:
- name: a
  kubeconfig: %s
- name: b
  kubeconfig: %s
  kube_api_qps: 30
  kubespawner_override:
    pod_connect_ip: "jupyter-{username}.b.example.test"
`, a.Kubeconfig, b.Kubeconfig))
	s := e.start(t, "spawnkit-service clusters", "-clusters", clustersFile)
	s.waitReady(t)
	if lines := s.lines("several clusters", `"a"`, `"b"`); len(lines) != 1 {
		t.Errorf("the log does not name the clusters once:\n%s", s.out.String())
	}

	// alice in a (the default), bob in b (profile gpu).
	for _, u := range []struct{ user, profile string }{{"alice", "default"}, {"bob", "gpu"}} {
		if r := postProfile(t, s, token, u.user, u.profile); r.code != http.StatusAccepted {
			t.Fatalf("POST %s (%s): %d %s", u.user, u.profile, r.code, r.body)
		}
	}
	waitRunning(t, s, token, "alice")
	waitRunning(t, s, token, "bob")
	_, alice, _ := getStatus(t, s, token, "alice")
	_, bob, _ := getStatus(t, s, token, "bob")
	if alice.Cluster != "a" || alice.State.Cluster != "a" || bob.Cluster != "b" || bob.State.Cluster != "b" {
		t.Errorf("clusters in status: alice %q (state %q), bob %q (state %q); want a, a, b, b", alice.Cluster, alice.State.Cluster, bob.Cluster, bob.State.Cluster)
	}
	if u, err := url.Parse(alice.URL); err != nil || !netip.MustParsePrefix(a.PodCIDR).Contains(netip.MustParseAddr(u.Hostname())) {
		t.Errorf("alice's URL %q is not a pod IP of cluster a (%s)", alice.URL, a.PodCIDR)
	}
	if u, err := url.Parse(bob.URL); err != nil || u.Hostname() != "jupyter-bob.b.example.test" {
		t.Errorf("bob's URL %q does not follow cluster b's pod_connect_ip", bob.URL)
	}
	for _, c := range []struct {
		k        *testcluster.Cluster
		name     string
		has, not string
	}{{a, "a", alice.State.PodName, bob.State.PodName}, {b, "b", bob.State.PodName, alice.State.PodName}} {
		pod, err := c.k.Client.CoreV1().Pods(e.ns).Get(ctx, c.has, metav1.GetOptions{})
		if err != nil {
			t.Errorf("cluster %s: %v", c.name, err)
		} else if pod.Labels[naming.LabelCluster] != c.name {
			t.Errorf("pod %s in cluster %s: label %s=%q", c.has, c.name, naming.LabelCluster, pod.Labels[naming.LabelCluster])
		}
		if _, err := c.k.Client.CoreV1().Pods(e.ns).Get(ctx, c.not, metav1.GetOptions{}); err == nil {
			t.Errorf("cluster %s also has pod %s", c.name, c.not)
		}
	}
	m := scrape(t, s)
	for _, name := range []string{"a", "b"} {
		if got := m.value(t, "spawnkit_manager_cluster_up", "cluster", name); got != 1 {
			t.Errorf("spawnkit_manager_cluster_up{cluster=%q} = %g, want 1", name, got)
		}
		if got := m.value(t, "spawnkit_manager_servers", "phase", "running", "cluster", name); got != 1 {
			t.Errorf("spawnkit_manager_servers{phase=running,cluster=%q} = %g, want 1", name, got)
		}
		if !strings.Contains(m.text, fmt.Sprintf(`spawnkit_reflector_healthy{cluster=%q`, name)) {
			t.Errorf("no spawnkit_reflector_healthy series of cluster %q:\n%s", name, strings.Join(m.samples("spawnkit_reflector_healthy"), "\n"))
		}
	}
	podB, err := b.Client.CoreV1().Pods(e.ns).Get(ctx, bob.State.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// b's API server goes away.
	down := time.Now()
	if err := b.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	var readyBody string
	testutil.EventuallyEvery(t, poll, binTimeout, "bob unknown", func() error {
		code, st, body := getStatus(t, s, token, "bob")
		return pending(code == http.StatusOK && st.Phase == "unknown" && st.Reason == "ClusterUnavailable", fmt.Sprintf("%d %s", code, body))
	})
	t.Logf("bob unknown %s after b's API server stopped", time.Since(down).Round(time.Millisecond))
	_, bobDown, _ := getStatus(t, s, token, "bob")
	if bobDown.ExitCode != nil || bobDown.Cluster != "b" {
		t.Errorf("bob while b is down: exit_code %v, cluster %q; want null (the hub keeps it), b", bobDown.ExitCode, bobDown.Cluster)
	}
	testutil.EventuallyEvery(t, poll, binTimeout, "/readyz 200 naming b degraded", func() error {
		code, body := s.readyz(t)
		readyBody = body
		return pending(code == http.StatusOK && strings.Contains(body, "[!]cluster/b degraded") && strings.Contains(body, "[+]cluster/a ok"), fmt.Sprintf("%d %q", code, body))
	})
	t.Logf("/readyz with b down:\n%s", readyBody)
	if got := scrape(t, s).value(t, "spawnkit_manager_cluster_up", "cluster", "b"); got != 0 {
		t.Errorf("spawnkit_manager_cluster_up{cluster=b} = %g with b down, want 0", got)
	}
	began := time.Now()
	r := postProfile(t, s, token, "carol", "gpu")
	if r.code != http.StatusServiceUnavailable || r.reason() != "ClusterUnavailable" || !strings.Contains(r.body, `\"b\"`) {
		t.Errorf("POST carol (gpu) with b down: %d %s; want 503 ClusterUnavailable naming b", r.code, r.body)
	}
	t.Logf("a start on b while down was refused in %s", time.Since(began).Round(time.Millisecond))
	if r := postProfile(t, s, token, "erin", "any"); r.code != http.StatusAccepted {
		t.Errorf("POST erin (any: b, a) with b down: %d %s", r.code, r.body)
	}
	waitRunning(t, s, token, "erin")
	if _, erin, _ := getStatus(t, s, token, "erin"); erin.Cluster != "a" {
		t.Errorf("erin (any) with b down went to %q, want a", erin.Cluster)
	}
	// a starts and stops normally.
	for i := range 3 {
		u := fmt.Sprintf("during-%d", i)
		if r := postProfile(t, s, token, u, "default"); r.code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s", u, r.code, r.body)
		}
		waitRunning(t, s, token, u)
		if r := binDo(t, httpClient(nil), http.MethodDelete, "http://"+s.listen+serverPath(u), token); r.code != http.StatusOK {
			t.Errorf("DELETE %s: %d %s", u, r.code, r.body)
		}
	}
	if code, st, body := getStatus(t, s, token, "alice"); code != http.StatusOK || st.Phase != "running" {
		t.Errorf("alice with b down: %d %s", code, body)
	}

	if err := b.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, s, token, "bob")
	testutil.EventuallyEvery(t, poll, binTimeout, "/readyz without degraded clusters", func() error {
		code, body := s.readyz(t)
		return pending(code == http.StatusOK && !strings.Contains(body, "degraded"), fmt.Sprintf("%d %q", code, body))
	})
	// b's informers catch up (a relist, a watch refused until the API
	// server's cache is warm): the cluster must not flap meanwhile. Their
	// health, which the Manager's check reads, says when they are done.
	testutil.EventuallyEvery(t, poll, binTimeout, "b's informers healthy", func() error {
		return informersHealthy(t, s, "b")
	})
	if n := len(s.lines("cluster unavailable", `"cluster"="b"`)); n != 1 {
		t.Errorf("b was marked unavailable %d times over one outage, want 1:\n%s", n, strings.Join(s.lines(`"cluster"="b"`), "\n"))
	}
	after, err := b.Client.CoreV1().Pods(e.ns).Get(ctx, bob.State.PodName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != podB.UID {
		t.Errorf("bob's pod was replaced during the outage: UID %s, now %s", podB.UID, after.UID)
	}
	if _, st, _ := getStatus(t, s, token, "bob"); st.URL != bob.URL {
		t.Errorf("bob's URL after the outage: %q, was %q", st.URL, bob.URL)
	}
}

// informersHealthy is nil when s's /metrics has informers of cluster
// and each is healthy.
func informersHealthy(t *testing.T, s *binService, cluster string) error {
	t.Helper()
	f := scrape(t, s).families["spawnkit_reflector_healthy"]
	var n int
	for _, series := range f.GetMetric() {
		for _, l := range series.GetLabel() {
			if l.GetName() != "cluster" || l.GetValue() != cluster {
				continue
			}
			n++
			if series.GetGauge().GetValue() != 1 {
				return fmt.Errorf("informer %v unhealthy", series.GetLabel())
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("no spawnkit_reflector_healthy series of cluster %q", cluster)
	}
	return nil
}

// TestBinaryClustersFileRefused: a -clusters file that cannot be used
// stops the binary (with -check too) with an error naming the file, the
// cluster and the cause.
func TestBinaryClustersFileRefused(t *testing.T) {
	c := testcluster.Require(t, cluster)
	e := newBinEnv(t, c, "clusters-refusal-token")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.kubeconfig")
	cases := []struct {
		name, content string
		want          []string
	}{
		{"no clusters", "clusters: []\n", []string{"names no cluster"}},
		{"null", "null\n", []string{"names no cluster"}},
		{"misspelt key", "clusters:\n- name: a\n  kubeconfg: x\n", []string{"kubeconfg", "line 3", `did you mean "kubeconfig"?`}},
		{"bad name", "clusters:\n- name: Gpu_EU\n  kubeconfig: " + c.Kubeconfig + "\n", []string{`"Gpu_EU"`, "DNS-1123"}},
		{"empty name", "clusters:\n- kubeconfig: " + c.Kubeconfig + "\n", []string{"cluster 1", "DNS-1123"}},
		{"twice", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n", []string{"cluster 2", "twice"}},
		{"in_cluster with a kubeconfig", "clusters:\n- name: a\n  in_cluster: true\n  kubeconfig: " + c.Kubeconfig + "\n", []string{"in_cluster", "kubeconfig"}},
		{"missing kubeconfig", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n- name: b\n  kubeconfig: " + missing + "\n", []string{`"b"`, missing}},
		{"unknown context", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n  context: nowhere\n", []string{`"a"`, "nowhere"}},
		{"bad override", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n  kubespawner_override: {pod_conect_ip: x}\n", []string{`"a"`, "pod_conect_ip"}},
		{"bad qps", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n  kube_api_qps: 0\n", []string{`"a"`, "kube_api_qps", "-1 for none"}},
		{"negative qps", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n  kube_api_qps: -5\n", []string{`"a"`, "kube_api_qps -5"}},
		{"qps without burst", "clusters:\n- name: a\n  kubeconfig: " + c.Kubeconfig + "\n  kube_api_qps: 20\n  kube_api_burst: 0\n", []string{`"a"`, "positive burst"}},
	}
	for _, tc := range cases {
		for _, check := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s check=%v", tc.name, check), func(t *testing.T) {
				file := filepath.Join(t.TempDir(), "clusters.yaml")
				writeTestFile(t, file, tc.content)
				args, _, _ := e.args(t)
				args = append(args, "-clusters", file)
				if check {
					args = append(args, "-check")
				}
				p := startProc(t, "spawnkit-service "+tc.name, nil, args...)
				p.wantFailure(t)
				for _, w := range append(tc.want, file) {
					if !strings.Contains(p.out.String(), w) {
						t.Errorf("the error does not name %q:\n%s", w, p.out.String())
					}
				}
			})
		}
	}
	t.Run("check accepts a good file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "clusters.yaml")
		writeTestFile(t, file, "clusters:\n- name: local\n  in_cluster: true\n- name: b\n  kubeconfig: "+c.Kubeconfig+"\n  kubespawner_override: {pod_connect_ip: 'jupyter-{username}.b.example.test'}\n")
		args, _, _ := e.args(t)
		p := startProc(t, "spawnkit-service -check -clusters", nil, append(args, "-clusters", file, "-check")...)
		if err := p.wait(t, exitBound); err != nil {
			t.Fatalf("-check of a good clusters file: %v\n%s", err, p.out.String())
		}
	})
}
