package spawner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/spawnkit/spawnkit/internal/retry"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
)

// ensureQuota makes the user namespace's ResourceQuota, or brings the hard
// limits and the cluster label of an existing one of spawnkit's up to
// date (an update keeps its usage accounting), and returns it as the API
// server has it.
func (s *Spawner) ensureQuota(ctx context.Context, want *corev1.ResourceQuota) (*corev1.ResourceQuota, error) {
	api := s.b.client.CoreV1().ResourceQuotas(want.Namespace)
	var out *corev1.ResourceQuota
	err := s.call(ctx, func(ctx context.Context) error {
		created, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			out = created
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if have.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit {
			return retry.Permanent(&CollisionError{Kind: "ResourceQuota", Namespace: have.Namespace, Name: have.Name, Want: s.server})
		}
		if apiequality.Semantic.DeepEqual(have.Spec.Hard, want.Spec.Hard) && hasClusterLabel(have.Labels, want.Labels) {
			out = have
			return nil
		}
		up := have.DeepCopy()
		up.Spec.Hard = want.Spec.Hard
		up.Labels = withClusterLabel(up.Labels, want.Labels)
		if out, err = api.Update(ctx, up, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ResourceQuota %s/%s: %w", want.Namespace, want.Name, err)
	}
	if !apiequality.Semantic.DeepEqual(out.Status.Hard, want.Spec.Hard) {
		// The API server's quota admission checks a pod against the
		// status's hard limits, which the quota controller copies from
		// the spec when it sees the quota created or updated: until then
		// a new quota refuses every pod ("status unknown for quota") and
		// an updated one applies its old limits. Wait for it, briefly (a
		// cluster whose controller is slow gets the API server's word).
		if got, ok := s.waitQuotaSynced(ctx, api, want); ok {
			out = got
		}
	}
	return out, nil
}

// quotaSyncWait bounds how long a start waits for the quota controller to
// take in a quota's new hard limits.
const quotaSyncWait = 10 * time.Second

// waitQuotaSynced polls the quota until its status has want's hard
// limits, within quotaSyncWait.
func (s *Spawner) waitQuotaSynced(ctx context.Context, api typedcorev1.ResourceQuotaInterface, want *corev1.ResourceQuota) (*corev1.ResourceQuota, bool) {
	ctx, cancel := context.WithTimeout(ctx, quotaSyncWait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, false
		case <-tick.C:
		}
		got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err == nil && apiequality.Semantic.DeepEqual(got.Status.Hard, want.Spec.Hard) {
			return got, true
		}
	}
}

// quotaRoom reports, as an error naming the quota and the amounts,
// whether quota has no room left for pod's cpu, memory and pod count (as
// the API server's quota admission would refuse the pod, but before the
// server's claim exists). The usage is the quota controller's last count
// (a new quota's is zero); the API server's own check, at the pod's
// create, stays the last word. Storage is left to it: a claim that
// exists is counted already, and one that is not is refused by the API
// server with the quota named, before it exists.
func quotaRoom(quota *corev1.ResourceQuota, pod *corev1.Pod) error {
	hard := quota.Spec.Hard
	// A quota on a compute resource makes the API server refuse a pod
	// with a container that does not set it (its quota admission):
	// say so now, naming the option.
	var unset []string
	for _, name := range slices.Sorted(maps.Keys(hard)) {
		res, limits, ok := quotaCompute(name)
		if !ok {
			continue
		}
		for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			list := manifest.ContainerRequests(c.Resources)
			if limits {
				list = c.Resources.Limits
			}
			if _, set := list[res]; !set {
				unset = append(unset, fmt.Sprintf("%s limits %s, and container %s sets no %s %s (%s)", quota.Name, name, c.Name, res, map[bool]string{true: "limit", false: "request"}[limits], computeOption(res, limits)))
			}
		}
	}
	if len(unset) > 0 {
		return fmt.Errorf("the ResourceQuota %s/%s of this user's namespace would make the API server refuse the pod: %s", quota.Namespace, quota.Name, strings.Join(unset, "; "))
	}
	need := manifest.PodUsage(pod)
	var short []string
	for _, name := range slices.Sorted(maps.Keys(hard)) {
		n, ok := need[name]
		if !ok || n.IsZero() {
			continue
		}
		limit := hard[name]
		used := quota.Status.Used[name]
		left := limit.DeepCopy()
		left.Sub(used)
		if n.Cmp(left) > 0 {
			if left.Sign() < 0 {
				left = resource.Quantity{}
			}
			short = append(short, fmt.Sprintf("%s: the server needs %s, %s of %s are in use (%s left)", name, n.String(), used.String(), limit.String(), left.String()))
		}
	}
	if len(short) > 0 {
		return fmt.Errorf("the ResourceQuota %s/%s of this user's namespace has no room for the server: %s", quota.Namespace, quota.Name, strings.Join(short, "; "))
	}
	return nil
}

// quotaCompute is the compute resource a quota's resource name limits,
// and whether it counts limits (else requests); ok is false for others.
func quotaCompute(name corev1.ResourceName) (res corev1.ResourceName, limits, ok bool) {
	switch name {
	case corev1.ResourceLimitsCPU:
		return corev1.ResourceCPU, true, true
	case corev1.ResourceLimitsMemory:
		return corev1.ResourceMemory, true, true
	case corev1.ResourceRequestsCPU, corev1.ResourceCPU:
		return corev1.ResourceCPU, false, true
	case corev1.ResourceRequestsMemory, corev1.ResourceMemory:
		return corev1.ResourceMemory, false, true
	}
	return "", false, false
}

// computeOption is the KubeSpawner option that sets a container's cpu or
// memory limit or request.
func computeOption(res corev1.ResourceName, limits bool) string {
	switch {
	case res == corev1.ResourceCPU && limits:
		return "cpu_limit"
	case res == corev1.ResourceCPU:
		return "cpu_guarantee"
	case limits:
		return "mem_limit"
	}
	return "mem_guarantee"
}
