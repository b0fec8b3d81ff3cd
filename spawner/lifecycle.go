package spawner

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/manifest"
)

// Status is what Poll reports, following KubeSpawner's contract.
type Status struct {
	// Running is true while the pod is pending or running ("not exited").
	Running bool
	// ExitCode is set when Running is false: the notebook container's exit
	// code, or 1 when there is no pod (or no container status).
	ExitCode int
	// URL is the server's current URL while it runs, and URLChanged
	// whether it differs from the one the last Start returned (a pod IP
	// can change when a pod is replaced behind the hub's back).
	URL        string
	URLChanged bool
	// Phase is the pod's phase, "" without a pod.
	Phase corev1.PodPhase
}

// Poll reports whether the server still runs. It reads only the shared
// cache, after its first sync (bounded by ctx): never an API call, and
// never a wrong "exited" from a cache that has not listed yet. A stopped
// pod is deleted when delete_stopped_pods is on (the default).
func (s *Spawner) Poll(ctx context.Context) (Status, error) {
	st := s.State()
	pods, err := s.podsHandle(ctx, st.Namespace)
	if err != nil {
		return Status{}, err
	}
	pod, ok, err := pods.Get(ctx, st.Namespace, st.PodName)
	if err != nil {
		return Status{}, fmt.Errorf("spawner: polling pod %s/%s: %w", st.Namespace, st.PodName, err)
	}
	if !ok {
		return Status{ExitCode: 1}, nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != manifest.ContainerName || cs.State.Terminated == nil {
			continue
		}
		status := Status{ExitCode: int(cs.State.Terminated.ExitCode), Phase: pod.Status.Phase}
		if boolOr(s.cfg.DeleteStoppedPods, true) {
			if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
				return status, fmt.Errorf("spawner: deleting stopped pod %s/%s: %w", st.Namespace, st.PodName, err)
			}
		}
		return status, nil
	}
	switch pod.Status.Phase {
	case corev1.PodPending, corev1.PodRunning, "":
		status := Status{Running: true, Phase: pod.Status.Phase}
		if pod.Status.PodIP != "" {
			status.URL = s.url(pod)
			s.mu.Lock()
			status.URLChanged = s.lastURL != "" && s.lastURL != status.URL
			s.mu.Unlock()
		}
		return status, nil
	}
	// Failed or Succeeded without a notebook container status.
	return Status{ExitCode: 1, Phase: pod.Status.Phase}, nil
}

// StopOptions configure Stop.
type StopOptions struct {
	// Now deletes with a grace period of 0 instead of delete_grace_period.
	Now bool
}

// Stop deletes the server's pod and waits until it is gone from the cache
// (bounded by ctx). A pod that is already gone is success, so Stop is
// idempotent. The claim is never touched.
func (s *Spawner) Stop(ctx context.Context, opts StopOptions) error {
	s.op.Lock()
	defer s.op.Unlock()
	st := s.State()
	grace := int64(s.cfg.DeleteGracePeriod.Duration() / time.Second)
	if opts.Now {
		grace = 0
	}
	if err := s.deletePod(ctx, st.Namespace, st.PodName, grace, ""); err != nil {
		return fmt.Errorf("spawner: stopping pod %s/%s: %w", st.Namespace, st.PodName, err)
	}
	return nil
}

// DeleteForever deletes the user's claim when delete_pvc is on (the
// default) — for a named server only when the claim name template uses
// the server name, so a claim shared with the user's other servers is
// never deleted. Call it after Stop, when the hub deletes the server.
func (s *Spawner) DeleteForever(ctx context.Context) error {
	s.op.Lock()
	defer s.op.Unlock()
	if !boolOr(s.cfg.DeletePVC, true) {
		return nil
	}
	if s.server.Servername != "" && !pvcTemplateNamesServer(s.namer.Options().PVCTemplate) {
		return nil
	}
	st := s.State()
	name := st.PVCName
	if name == "" {
		name = s.names.PVC
	}
	err := s.client.CoreV1().PersistentVolumeClaims(st.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("spawner: deleting claim %s/%s: %w", st.Namespace, name, err)
	}
	return nil
}

// pvcTemplateNamesServer reports whether a claim template depends on the
// server name.
func pvcTemplateNamesServer(t string) bool {
	for _, f := range []string{"servername", "user_server", "Servername", "UserServer"} {
		if strings.Contains(t, f) {
			return true
		}
	}
	return false
}
