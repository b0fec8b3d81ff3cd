package spawner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// cached is pod as the cache keeps it (nil for nil): the rules read cached pods.
func cached(pod *corev1.Pod) *reflector.Pod {
	if pod == nil {
		return nil
	}
	return reflector.NewPod(pod)
}

func podWith(phase corev1.PodPhase, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase, PodIP: "127.0.0.9"}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func readyCondition(s corev1.ConditionStatus) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: s})
	}
}

func TestIsReady(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"running and PodReady", podWith(corev1.PodRunning, readyCondition(corev1.ConditionTrue)), true},
		{"containers ready but a readiness gate is not (PodReady false)", podWith(corev1.PodRunning, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "notebook", Ready: true}}
			readyCondition(corev1.ConditionFalse)(p)
		}), false},
		{"no PodReady condition", podWith(corev1.PodRunning, nil), false},
		{"pending", podWith(corev1.PodPending, readyCondition(corev1.ConditionTrue)), false},
		{"no IP", podWith(corev1.PodRunning, func(p *corev1.Pod) { p.Status.PodIP = ""; readyCondition(corev1.ConditionTrue)(p) }), false},
		{"being deleted", podWith(corev1.PodRunning, func(p *corev1.Pod) { p.DeletionTimestamp = &now; readyCondition(corev1.ConditionTrue)(p) }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isReady(cached(tc.pod)); got != tc.want {
				t.Errorf("isReady = %v, want %v", got, tc.want)
			}
		})
	}
}

func terminated(code int32, reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "notebook",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}}
	}
}

func TestPodExit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		exited bool
		code   int
		reason Reason
	}{
		{"no pod", nil, true, 1, ReasonPodDeleted},
		{"pending", podWith(corev1.PodPending, nil), false, 0, ""},
		{"running", podWith(corev1.PodRunning, nil), false, 0, ""},
		{"exit code 3", podWith(corev1.PodFailed, terminated(3, "Error")), true, 3, ReasonExited},
		{"exit 0", podWith(corev1.PodSucceeded, terminated(0, "Completed")), true, 0, ReasonExited},
		{"OOM killed", podWith(corev1.PodFailed, terminated(137, "OOMKilled")), true, 137, ReasonOOMKilled},
		{"terminated while the pod still says Running", podWith(corev1.PodRunning, terminated(2, "Error")), true, 2, ReasonExited},
		{"evicted without container status", podWith(corev1.PodFailed, func(p *corev1.Pod) { p.Status.Reason = "Evicted" }), true, 1, ReasonEvicted},
		{"evicted with a killed container", podWith(corev1.PodFailed, func(p *corev1.Pod) {
			p.Status.Reason = "Evicted"
			terminated(137, "Error")(p)
		}), true, 137, ReasonEvicted},
		{"failed without a notebook status", podWith(corev1.PodFailed, nil), true, 1, ReasonPodEnded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := podExit(cached(tc.pod))
			if x.Exited != tc.exited || x.Code != tc.code || x.Reason != tc.reason {
				t.Errorf("podExit = %+v; want exited %v code %d reason %s", x, tc.exited, tc.code, tc.reason)
			}
			if x.Exited && x.Message == "" {
				t.Error("an exit without a message")
			}
		})
	}
}

func TestRetryableIsAnAllowList(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewInternalError(errors.New("boom")), true},
		{apierrors.NewServiceUnavailable("later"), true},
		{apierrors.NewServerTimeout(gr, "create", 1), true},
		{apierrors.NewTimeoutError("timeout", 1), true},
		{fmt.Errorf("%w after 3s: %w", errRequestTimeout, context.Canceled), true},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{io.ErrUnexpectedEOF, true},
		{errReplaced, true},
		{apierrors.NewBadRequest("no"), false},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil), false},
		{apierrors.NewForbidden(gr, "x", errors.New("quota")), false},
		{apierrors.NewNotFound(gr, "x"), false},
		{apierrors.NewConflict(gr, "x", errors.New("changed")), false},
		{apierrors.NewAlreadyExists(gr, "x"), false},
		{errors.New("something else"), false},
		{context.Canceled, false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestDeleteGracePeriodZeroMeansZero(t *testing.T) {
	c, err := kubespawner.Load([]byte("delete_grace_period: 0\nimage: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.WithDefaults().DeleteGracePeriod; d == nil || *d != 0 {
		t.Fatalf("delete_grace_period 0 became %v", d)
	}
	if d := (kubespawner.Config{}).WithDefaults().DeleteGracePeriod; d == nil || *d != 1 {
		t.Fatalf("unset delete_grace_period is %v, want the default 1", d)
	}
}

func TestPlanRejectsWhatCanOnlyFailLater(t *testing.T) {
	for key, mutate := range map[string]func(*kubespawner.Config){
		"port":                    func(c *kubespawner.Config) { c.Port = 70000 },
		"start_timeout":           func(c *kubespawner.Config) { c.StartTimeout = -1 },
		"k8s_api_request_timeout": func(c *kubespawner.Config) { c.K8sAPIRequestTimeout = -3 },
		"extra_labels":            func(c *kubespawner.Config) { c.ExtraLabels = map[string]string{"bad key!": "x"} },
	} {
		cfg := baseConfig("ns")
		mutate(&cfg)
		if _, err := Plan(t.Context(), naming.Server{Username: "u"}, cfg, StartOptions{}); err == nil {
			t.Errorf("%s: Plan accepted a bad value", key)
		}
	}
}

// TestDerivedLimitEnv: a hub that does not pass JupyterHub's
// MEM_LIMIT/CPU_LIMIT variables gets them from the configuration, in
// JupyterHub's format; a hub that does keeps its own.
func TestDerivedLimitEnv(t *testing.T) {
	cfg, err := kubespawner.Load([]byte("image: base:1\nmem_limit: 2.5G\nmem_guarantee: 1G\ncpu_limit: 2\ncpu_guarantee: 0.25\n"))
	if err != nil {
		t.Fatal(err)
	}
	env := func(opts StartOptions) map[string]string {
		o, err := Plan(t.Context(), naming.Server{Username: "lim"}, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range o.Pod.Spec.Containers[0].Env {
			out[e.Name] = e.Value
		}
		return out
	}
	got := env(StartOptions{})
	for k, want := range map[string]string{"MEM_LIMIT": "2684354560", "MEM_GUARANTEE": "1073741824", "CPU_LIMIT": "2.0", "CPU_GUARANTEE": "0.25"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	if got := env(StartOptions{Env: []corev1.EnvVar{{Name: "MEM_LIMIT", Value: "1"}}}); got["MEM_LIMIT"] != "1" {
		t.Errorf("the hub's MEM_LIMIT was replaced: %q", got["MEM_LIMIT"])
	}
}

// startWakes wakes a start for the adds and updates that can end or
// advance its wait, and for nothing else a starting pod goes through.
func TestStartWakes(t *testing.T) {
	base := func(mutate ...func(*corev1.Pod)) *reflector.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "jupyter-a", UID: "uid-1", ResourceVersion: "1", Labels: map[string]string{"a": "b"}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "notebook"}}}}
		for _, m := range mutate {
			m(p)
		}
		return cached(p)
	}
	waiting := func(reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m " + reason}}
		}
	}
	initWaiting := func(reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}
		}
	}
	running := func(p *corev1.Pod) {
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "127.0.0.9"
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	}
	bound := func(p *corev1.Pod) {
		p.ResourceVersion, p.Spec.NodeName, p.Status.HostIP = "2", "kwok-node-0", "127.0.0.2"
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	}
	fatal := []string{"CreateContainerConfigError"}
	for _, tc := range []struct {
		name     string
		old, new *reflector.Pod
		want     bool
	}{
		{"bound to a node", base(), base(bound), false},
		{"labels and annotations", base(), base(func(p *corev1.Pod) { p.Labels["c"] = "d"; p.Annotations = map[string]string{"spawnkit.dev/x": "y"} }), false},
		{"ContainerCreating", base(bound), base(bound, waiting("ContainerCreating")), false},
		{"running, not ready", base(bound, waiting("ContainerCreating")), base(bound, running, readyCondition(corev1.ConditionFalse)), false},
		{"a waiting message changes", base(waiting("ContainerCreating")), base(waiting("ContainerCreating"), func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Waiting.Message = "other"
		}), false},
		{"ready", base(bound, running, readyCondition(corev1.ConditionFalse)), base(bound, running, readyCondition(corev1.ConditionTrue)), true},
		{"no longer ready", base(running, readyCondition(corev1.ConditionTrue)), base(running, readyCondition(corev1.ConditionFalse)), true},
		{"being deleted", base(), base(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), true},
		{"another pod of the name", base(), base(func(p *corev1.Pod) { p.UID = "uid-2" }), true},
		{"exited", base(running), base(running, terminated(1, "Error")), true},
		{"failed without a status", base(), base(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), true},
		{"a pull fails", base(waiting("ContainerCreating")), base(waiting("ErrImagePull")), true},
		{"a pull backs off", base(waiting("ErrImagePull")), base(waiting("ImagePullBackOff")), true},
		{"a pull fails again", base(waiting("ImagePullBackOff")), base(waiting("ErrImagePull")), true},
		{"a pull fails in an init container", base(initWaiting("PodInitializing")), base(initWaiting("ErrImagePull")), true},
		{"a fatal reason", base(waiting("ContainerCreating")), base(waiting("CreateContainerConfigError")), true},
		{"an init container appears", base(), base(initWaiting("ErrImagePull")), true},
		{"statuses appear, creating", base(func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }), base(waiting("ContainerCreating")), false},
		{"statuses appear, pulling failed", base(func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }), base(waiting("ErrImagePull")), true},
		{"an init container's status goes", base(initWaiting("PodInitializing")), base(), false},
		{"a failing pull's status goes", base(initWaiting("ErrImagePull")), base(), true},
		{"added, pending", nil, base(bound, waiting("ContainerCreating")), false},
		{"added, ready", nil, base(bound, running, readyCondition(corev1.ConditionTrue)), true},
		{"added, being deleted", nil, base(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }), true},
		{"added, exited", nil, base(running, terminated(1, "Error")), true},
		{"added, a pull failed", nil, base(waiting("ErrImagePull")), true},
		{"added, a fatal reason", nil, base(initWaiting("CreateContainerConfigError")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := startWakes(fatal)(tc.old, tc.new); got != tc.want {
				t.Errorf("startWakes = %v, want %v", got, tc.want)
			}
		})
	}
}

// A Manager's start forwards its pod's events from the informer's
// handler, once each, without being woken for them, except while it
// waits for its first event; events of another pod of the name, or
// without a uid, are not its.
func TestEventForwarderFromHandler(t *testing.T) {
	stream := NewStream()
	em := newEmitter(nil, stream, clock.RealClock{})
	em.inline = true
	fw := &eventForwarder{em: em, uid: "pod-1"}
	ev := func(uid, pod types.UID, count int32, reason string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: uid}, Count: count, Reason: reason, Message: reason,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", UID: pod}}
	}
	if fw.fromHandler(ev("e1", "pod-1", 1, "Scheduled")) {
		t.Error("an event of the start's pod woke the start")
	}
	fw.forward(ev("e1", "pod-1", 1, "Scheduled")) // the start's own pass finds it sent
	if fw.fromHandler(ev("e2", "pod-2", 1, "Other")) {
		t.Error("an event of another pod woke the start")
	}
	if fw.fromHandler(ev("e3", "", 1, "NoUID")) {
		t.Error("an event without a uid woke the start")
	}
	fw.fromHandler(ev("e1", "pod-1", 2, "Scheduled")) // its next occurrence
	if !fw.any() {
		t.Error("any = false after events were sent")
	}
	fw.graceWait.Store(true)
	if !fw.fromHandler(ev("e4", "pod-1", 1, "Pulled")) {
		t.Error("an event did not wake a start waiting for its first event")
	}
	var got []string
	events, _ := stream.Snapshot()
	for _, e := range events {
		if e.Event == nil {
			t.Errorf("a progress event without its pod event: %+v", e)
			continue
		}
		got = append(got, fmt.Sprintf("%s/%d", e.Event.UID, e.Event.Count))
	}
	if want := []string{"e1/1", "e1/2", "e4/1"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
}
