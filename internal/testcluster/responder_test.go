package testcluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// podWithPorts is a test pod whose containers declare the given ports, one
// container per port.
func podWithPorts(name string, annotations map[string]string, ports ...int32) *corev1.Pod {
	pod := testPod(name, annotations)
	pod.Spec.Containers = nil
	for i, port := range ports {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
			Name:  fmt.Sprintf("c%d", i),
			Image: "quay.io/jupyter/base-notebook:latest",
			Ports: []corev1.ContainerPort{{ContainerPort: port}},
		})
	}
	return pod
}

// runPod creates the pod and waits until it is Running with an IP.
func runPod(t *testing.T, ctx context.Context, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	c := testcluster.Require(t, cluster)
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	got, err := c.WaitForPod(ctx, ns, pod.Name, testcluster.PodRunning)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// get fetches url once, on a new connection (so that a server that has
// gone cannot be reached through a kept-alive one), and decodes the answer.
func get(ctx context.Context, url string) (testcluster.Answer, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return testcluster.Answer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return testcluster.Answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return testcluster.Answer{}, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		return testcluster.Answer{}, fmt.Errorf("GET %s: %s, Content-Type %q: %s", url, resp.Status, resp.Header.Get("Content-Type"), body)
	}
	var a testcluster.Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return testcluster.Answer{}, fmt.Errorf("GET %s: decoding %q: %w", url, body, err)
	}
	return a, nil
}

// waitForAnswer polls url until it answers: a responder starts listening
// just after it sees the pod Running, which may be just after the test does.
func waitForAnswer(t *testing.T, ctx context.Context, url string, within time.Duration) testcluster.Answer {
	t.Helper()
	var a testcluster.Answer
	testutil.EventuallyEvery(t, 50*time.Millisecond, within, url+" to answer", func() error {
		var err error
		if a, err = get(ctx, url); err != nil {
			return fmt.Errorf("%s does not answer: %w", url, err)
		}
		return nil
	})
	return a
}

// waitForRefused polls url until connections are refused.
func waitForRefused(t *testing.T, ctx context.Context, url string, within time.Duration) {
	t.Helper()
	testutil.EventuallyEvery(t, 50*time.Millisecond, within, url+" to refuse connections", func() error {
		if a, err := get(ctx, url); !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s still reachable: answer %+v, err %v", url, a, err)
		}
		return nil
	})
}

func podURL(pod *corev1.Pod, port int32, path string) string {
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))) + path
}

func TestNodeAndPodIPsAreLoopback(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	podCIDR, err := netip.ParsePrefix(c.PodCIDR)
	if err != nil || podCIDR.Bits() < 8 || !loopback.Contains(podCIDR.Addr()) {
		t.Fatalf("Cluster.PodCIDR = %q (%v), want a range within %s", c.PodCIDR, err, loopback)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: testcluster.NodeLabel + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		var internal []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = append(internal, a.Address)
			}
		}
		if len(internal) == 0 {
			t.Errorf("node %s has no InternalIP: %+v", n.Name, n.Status.Addresses)
		}
		for _, a := range internal {
			if ip, err := netip.ParseAddr(a); err != nil || !ip.IsLoopback() || !podCIDR.Contains(ip) {
				t.Errorf("node %s: InternalIP %q is not a loopback address in %s", n.Name, a, podCIDR)
			}
		}
	}
	for i := range 3 {
		pod := runPod(t, ctx, ns, testPod(fmt.Sprintf("ip-%d", i), nil))
		if ip, err := netip.ParseAddr(pod.Status.HostIP); err != nil || !ip.IsLoopback() {
			t.Errorf("pod %s: hostIP %q is not a loopback address", pod.Name, pod.Status.HostIP)
		}
		if ip, err := netip.ParseAddr(pod.Status.PodIP); err != nil || !podCIDR.Contains(ip) {
			t.Errorf("pod %s: podIP %q is not in %s", pod.Name, pod.Status.PodIP, podCIDR)
		}
		for _, ip := range pod.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err != nil || !podCIDR.Contains(a) {
				t.Errorf("pod %s: podIPs entry %q is not in %s", pod.Name, ip.IP, podCIDR)
			}
		}
	}
}

func TestResponderAnswers(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	// Every declared port answers, whichever container declares it.
	pod := runPod(t, ctx, ns, podWithPorts("answers", nil, 8888, 9000))
	for _, tc := range []struct {
		name string
		port int32
		path string
	}{
		{"notebook port with a path", 8888, "/user/alice/api/status"},
		{"second container's port at the root", 9000, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := waitForAnswer(t, ctx, podURL(pod, tc.port, tc.path+"?token=x"), 5*time.Second)
			want := testcluster.Answer{Pod: pod.Name, Namespace: ns, IP: pod.Status.PodIP, Path: tc.path}
			if got != want {
				t.Errorf("answer = %+v, want %+v", got, want)
			}
		})
	}
	// A port no container declares is not served.
	if _, err := get(ctx, podURL(pod, 8889, "/")); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("undeclared port 8889: err = %v, want connection refused", err)
	}
}

func TestResponderBootDelay(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	const delay = 3 * time.Second
	pod := runPod(t, ctx, ns, podWithPorts("slow", map[string]string{testcluster.BootDelayAnnotation: delay.String()}, 8888))
	running := time.Now()
	url := podURL(pod, 8888, "/")
	if _, err := get(ctx, url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GET at once: err = %v, want connection refused during the boot delay", err)
	}
	// Readiness is not delayed.
	ready, err := cluster.WaitForPod(ctx, ns, pod.Name, func(p *corev1.Pod) (bool, error) { return p != nil && podReady(p), nil })
	if err != nil {
		t.Fatal(err)
	}
	if since := time.Since(running); since > delay/2 {
		t.Errorf("pod became Ready %s after Running; the boot delay must not hold readiness", since)
	}
	if time.Since(running) < delay/2 {
		if _, err := get(ctx, url); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("GET once Ready: err = %v, want connection refused during the boot delay", err)
		}
	}
	got := waitForAnswer(t, ctx, url, 2*delay)
	// The responder counts the delay from when it saw the pod Running,
	// which may be a little before this test did.
	if since := time.Since(running); since < delay-time.Second {
		t.Errorf("answered %s after Running, want about %s", since, delay)
	}
	if got.Pod != ready.Name {
		t.Errorf("answer from %q, want %q", got.Pod, ready.Name)
	}
}

func TestResponderStopsWithPod(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)

	for _, tc := range []struct {
		name        string
		annotations map[string]string
		// end makes the pod stop running and waits until it has.
		end func(t *testing.T, pod *corev1.Pod)
	}{
		{"deleted", nil, func(t *testing.T, pod *corev1.Pod) {
			if err := c.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.WaitForPod(ctx, ns, pod.Name, testcluster.PodGone); err != nil {
				t.Fatal(err)
			}
		}},
		{"exited", map[string]string{
			testcluster.BehaviorAnnotation:  testcluster.BehaviorExit,
			testcluster.ExitAfterAnnotation: "2s",
		}, func(t *testing.T, pod *corev1.Pod) {
			if _, err := c.WaitForPod(ctx, ns, pod.Name, func(p *corev1.Pod) (bool, error) {
				return p != nil && p.Status.Phase == corev1.PodFailed, nil
			}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := runPod(t, ctx, ns, podWithPorts("stops-"+tc.name, tc.annotations, 8888))
			url := podURL(pod, 8888, "/")
			waitForAnswer(t, ctx, url, 5*time.Second)
			tc.end(t, pod)
			waitForRefused(t, ctx, url, 10*time.Second)
		})
	}
}

// TestReusedIPAnswersWithItsOwnName deletes a pod and creates pods until
// kwok hands one the freed IP: that pod must answer as itself, not as the
// pod that had the IP before.
func TestReusedIPAnswersWithItsOwnName(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 2*time.Minute)

	first := runPod(t, ctx, ns, podWithPorts("first", nil, 8888))
	waitForAnswer(t, ctx, podURL(first, 8888, "/"), 5*time.Second)
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitForPod(ctx, ns, first.Name, testcluster.PodGone); err != nil {
		t.Fatal(err)
	}
	// kwok hands out freed IPs before new ones, in no particular order;
	// each pod created takes one, so the first pod's IP comes up within
	// as many pods as this cluster has deleted.
	var seen []string
	for i := range 100 {
		next := runPod(t, ctx, ns, podWithPorts(fmt.Sprintf("next-%d", i), nil, 8888))
		if next.Status.PodIP != first.Status.PodIP {
			seen = append(seen, next.Status.PodIP)
			continue
		}
		got := waitForAnswer(t, ctx, podURL(next, 8888, "/"), 5*time.Second)
		if got.Pod != next.Name || got.IP != first.Status.PodIP {
			t.Fatalf("pod %s on reused IP %s answered %+v", next.Name, next.Status.PodIP, got)
		}
		return
	}
	t.Fatalf("no new pod got %s back; got %s", first.Status.PodIP, strings.Join(seen, ", "))
}

// TestResponderRetriesAddressInUse: a pod's address held by someone else
// is retried, not fatal; the pod answers once the address is free.
func TestResponderRetriesAddressInUse(t *testing.T) {
	testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 30*time.Second)

	// The boot delay leaves time to take the address first.
	pod := runPod(t, ctx, ns, podWithPorts("contended", map[string]string{testcluster.BootDelayAnnotation: "2s"}, 8888))
	addr := net.JoinHostPort(pod.Status.PodIP, "8888")
	var lc net.ListenConfig
	squatter, err := lc.Listen(ctx, "tcp4", addr)
	if err != nil {
		t.Fatalf("taking %s before the responder: %v", addr, err)
	}
	// Past the boot delay the responder tries, finds the address in use
	// and says so; only then does the squatter let go.
	name := ns + "/" + pod.Name
	testutil.EventuallyEvery(t, 50*time.Millisecond, 10*time.Second, "the responder to find its address in use", func() error {
		if log := cluster.LogTail("responders", 1000); !strings.Contains(log, name+": cannot listen on "+addr+" yet") {
			return fmt.Errorf("responders.log does not say %s found %s in use:\n%s", name, addr, cluster.LogTail("responders", 20))
		}
		return nil
	})
	if err := squatter.Close(); err != nil {
		t.Fatal(err)
	}
	got := waitForAnswer(t, ctx, podURL(pod, 8888, "/"), 5*time.Second)
	if got.Pod != pod.Name {
		t.Errorf("answer from %q, want %q", got.Pod, pod.Name)
	}
	if log := cluster.LogTail("responders", 1000); !strings.Contains(log, name+": listening on "+addr+" after") {
		t.Errorf("responders.log does not say %s listened on %s after retrying:\n%s", name, addr, cluster.LogTail("responders", 20))
	}
}

func TestStartRejectsPodCIDR(t *testing.T) {
	for _, tc := range []struct{ name, cidr string }{
		{"private range", "10.244.0.0/16"},
		{"other private range", "192.168.0.0/24"},
		{"straddles loopback", "126.0.0.0/7"},
		{"IPv6", "::1/128"},
		{"too small", "127.1.2.0/28"},
		{"not a CIDR", "127.1.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// An empty binary directory: the range is checked first, so
			// nothing starts.
			_, err := testcluster.Start(t.Context(), testcluster.Options{Level: testcluster.Lifecycle, BinDir: t.TempDir(), PodCIDR: tc.cidr})
			if err == nil || !strings.Contains(err.Error(), "PodCIDR") || !strings.Contains(err.Error(), tc.cidr) {
				t.Errorf("Start with PodCIDR %q: err = %v, want an error naming Options.PodCIDR and the value", tc.cidr, err)
			}
		})
	}
}

// TestResponderHold: a held pod refuses connections, Ready or not, until
// the annotation is removed; then it answers.
func TestResponderHold(t *testing.T) {
	c := testcluster.Require(t, cluster)
	ns := newNamespace(t)
	ctx := ctxTimeout(t, 60*time.Second)

	pod := runPod(t, ctx, ns, podWithPorts("held", map[string]string{testcluster.HoldAnnotation: "true"}, 8888))
	url := podURL(pod, 8888, "/")
	if _, err := cluster.WaitForPod(ctx, ns, pod.Name, func(p *corev1.Pod) (bool, error) { return p != nil && podReady(p), nil }); err != nil {
		t.Fatal(err)
	}
	// The responders handle pods one at a time in the order they see
	// them: once a pod that ran after the held one answers, the held one
	// has been handled, and had the hold been ignored its listener would
	// have been started, before the other's.
	other := runPod(t, ctx, ns, podWithPorts("not-held", nil, 8888))
	waitForAnswer(t, ctx, podURL(other, 8888, "/"), 10*time.Second)
	if _, err := get(ctx, url); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GET while held: err = %v, want connection refused", err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + testcluster.HoldAnnotation + `":null}}}`)
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := waitForAnswer(t, ctx, url, 10*time.Second); got.Pod != pod.Name {
		t.Errorf("answer from %q, want %q", got.Pod, pod.Name)
	}
}
