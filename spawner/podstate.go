package spawner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/reflector"
)

// The rules in this file read a pod's state and nothing else: pure
// functions of a cached pod (reflector.Pod), table-tested in
// podstate_test.go. Start, Poll and the Manager all decide through them,
// so they never disagree.

// isReady reports whether a pod serves: Running, with an IP, not being
// deleted, and its PodReady condition True. PodReady is the kubelet's
// verdict, which includes every container's readiness and the pod's
// readiness gates.
func isReady(pod *reflector.Pod) bool {
	return pod.Phase == corev1.PodRunning && pod.PodIP != "" && pod.DeletionTimestamp == nil &&
		pod.Ready.Status == corev1.ConditionTrue
}

// exit says whether a server has exited and how, following KubeSpawner's
// poll: a pending or running pod has not exited (even while it is being
// deleted); a terminated notebook container gives its exit code; no pod,
// or a pod that ended without a notebook container status, is exit code
// 1. Reason and message say why in words a hub can show.
type exit struct {
	Exited  bool
	Code    int
	Reason  Reason
	Message string
}

func podExit(pod *reflector.Pod) exit {
	if pod == nil {
		return exit{Exited: true, Code: 1, Reason: ReasonPodDeleted, Message: "the server's pod does not exist"}
	}
	evicted := pod.Phase == corev1.PodFailed && pod.Reason == "Evicted"
	for _, cs := range pod.ContainerStatuses {
		if cs.Name != manifest.ContainerName || cs.State.Terminated == nil {
			continue
		}
		t := cs.State.Terminated
		e := exit{Exited: true, Code: int(t.ExitCode), Reason: ReasonExited,
			Message: fmt.Sprintf("container %s exited with code %d", cs.Name, t.ExitCode)}
		if t.Reason != "" {
			e.Message += " (" + t.Reason + ")"
		}
		switch {
		case evicted:
			e.Reason, e.Message = ReasonEvicted, "the pod was evicted: "+pod.Message
		case t.Reason == "OOMKilled":
			e.Reason = ReasonOOMKilled
		}
		return e
	}
	switch pod.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		if evicted {
			return exit{Exited: true, Code: 1, Reason: ReasonEvicted, Message: "the pod was evicted: " + pod.Message}
		}
		return exit{Exited: true, Code: 1, Reason: ReasonPodEnded,
			Message: fmt.Sprintf("the pod ended (%s) without a status for container %s", pod.Phase, manifest.ContainerName)}
	}
	return exit{}
}

// fatalReason returns the first container waiting for one of the fatal
// reasons, and a message naming it.
func fatalReason(pod *reflector.Pod, fatal []string, envSecret string) (Reason, string) {
	for _, cs := range allStatuses(pod) {
		if w := cs.State.Waiting; w != nil && slices.Contains(fatal, w.Reason) && !envSecretMissing(w, envSecret) {
			return Reason(w.Reason), fmt.Sprintf("container %s is waiting: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return "", ""
}

// envSecretMissing reports whether a container waits only because the
// kubelet looked for the start's environment Secret before the start
// created it, right after the pod (afterPod): the kubelet retries, and
// the container starts then. The kubelet's message names the Secret
// (`secret "<name>" not found`).
func envSecretMissing(w *corev1.ContainerStateWaiting, envSecret string) bool {
	return w.Reason == "CreateContainerConfigError" && envSecret != "" &&
		strings.Contains(w.Message, strconv.Quote(envSecret)+" not found")
}

// startWakes is the wake function of a start's subscription to its pod
// (Registry.SubscribeIf): an update wakes the start only if it can change
// what the start waits on, in waitReady and waitPodGone: the pod's uid,
// its deletion, its readiness, its exit, a container waiting for one of
// the fatal reasons, or a container's image pull failing or backing off
// (the pull tracker counts each turn to ErrImagePull). The other updates
// of a starting pod (its binding to a node, PodScheduled, ContainerCreating
// and the other conditions) do not: each wake-up is a goroutine hand-off,
// about half of them in a start's life. Nor does the add of a pod that is
// in none of those states (the start's own pod, just created, or another
// of the name): the start learns of it from the subscription's Seen.
// Deletions always wake it, and so do its pod's events, except those of a
// Manager's start, which the event informer's handler forwards to the
// progress stream (eventForwarder) without waking it.
func startWakes(fatal []string) func(old, updated *reflector.Pod) bool {
	return func(old, updated *reflector.Pod) bool {
		if old == nil {
			return updated.DeletionTimestamp != nil || isReady(updated) || podExit(updated).Exited ||
				anyWatchedWait(updated.InitContainerStatuses, fatal) || anyWatchedWait(updated.ContainerStatuses, fatal)
		}
		return old.UID != updated.UID ||
			(old.DeletionTimestamp == nil) != (updated.DeletionTimestamp == nil) ||
			isReady(old) != isReady(updated) ||
			podExit(old).Exited != podExit(updated).Exited ||
			!sameWaits(old.InitContainerStatuses, updated.InitContainerStatuses, fatal) ||
			!sameWaits(old.ContainerStatuses, updated.ContainerStatuses, fatal)
	}
}

// anyWatchedWait reports whether a container waits for a reason a start
// acts on.
func anyWatchedWait(statuses []reflector.ContainerStatus, fatal []string) bool {
	for _, cs := range statuses {
		if watchedWait(cs, fatal) != "" {
			return true
		}
	}
	return false
}

// sameWaits reports whether two versions of a pod's container statuses
// agree on every waiting reason a start acts on: the fatal ones and the
// image pull failures. Statuses that appear or go without such a reason
// (a kubelet reports the containers first as ContainerCreating) do not
// count.
func sameWaits(a, b []reflector.ContainerStatus, fatal []string) bool {
	return watchedWaitsIn(a, b, fatal) && watchedWaitsIn(b, a, fatal)
}

// watchedWaitsIn reports whether every container of a that waits for a
// reason a start acts on waits for the same reason in b.
func watchedWaitsIn(a, b []reflector.ContainerStatus, fatal []string) bool {
	for _, cs := range a {
		w := watchedWait(cs, fatal)
		if w == "" {
			continue
		}
		i := slices.IndexFunc(b, func(o reflector.ContainerStatus) bool { return o.Name == cs.Name })
		if i < 0 || watchedWait(b[i], fatal) != w {
			return false
		}
	}
	return true
}

// watchedWait is a container's waiting reason if a start acts on it, else "".
func watchedWait(cs reflector.ContainerStatus, fatal []string) string {
	w := cs.State.Waiting
	if w == nil {
		return ""
	}
	if w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff" || slices.Contains(fatal, w.Reason) {
		return w.Reason
	}
	return ""
}

func allStatuses(pod *reflector.Pod) []reflector.ContainerStatus {
	return append(slices.Clone(pod.InitContainerStatuses), pod.ContainerStatuses...)
}

// pullTracker implements spawnkit's image-pull policy. The kubelet
// reports a failed pull as ErrImagePull, then waits (ImagePullBackOff)
// before it pulls again. One failure is often a registry hiccup that the
// next pull fixes, so neither reason ends a start by itself: a start ends
// when one container's pull has failed `after` times (its state turned to
// ErrImagePull that often; default 2). An operator who wants the first
// failure to be fatal lists ErrImagePull in fatal_reasons, which always
// end a start at once.
type pullTracker struct {
	after int // failures that end the start
	state map[string]*pullState
}

type pullState struct {
	last  string
	count int
}

func newPullTracker(after int) *pullTracker {
	if after <= 0 {
		after = 2
	}
	return &pullTracker{after: after, state: map[string]*pullState{}}
}

// observe records every container's waiting reason; call it on every
// state of the pod seen. It returns a message when a container's pulls
// have failed often enough to end the start.
func (p *pullTracker) observe(pod *reflector.Pod) (string, bool) {
	for _, cs := range allStatuses(pod) {
		st := p.state[cs.Name]
		if st == nil {
			st = &pullState{}
			p.state[cs.Name] = st
		}
		cur := ""
		if cs.State.Waiting != nil {
			cur = cs.State.Waiting.Reason
		}
		if cur == "ErrImagePull" && st.last != "ErrImagePull" {
			st.count++
		}
		st.last = cur
		if st.count >= p.after && (cur == "ErrImagePull" || cur == "ImagePullBackOff") {
			return fmt.Sprintf("container %s: the image pull failed %d times: %s", cs.Name, st.count, cs.State.Waiting.Message), true
		}
	}
	return "", false
}
