package spawner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/retry"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// checkOwner compares the owner annotations of an existing object with
// this server. An object without them, or naming another server, is a
// *CollisionError. With serverMatters false only the user must match (a
// claim whose name template does not name the server is shared by a
// user's servers).
func (s *Spawner) checkOwner(kind string, obj metav1.Object, serverMatters bool) error {
	return checkOwner(s.server, kind, obj, serverMatters)
}

func checkOwner(want naming.Server, kind string, obj metav1.Object, serverMatters bool) error {
	ann := obj.GetAnnotations()
	user, ok := ann[naming.AnnotationUsername]
	return checkRecordedOwner(want, kind, obj.GetNamespace(), obj.GetName(), user, ok, ann[naming.AnnotationServername], serverMatters)
}

// checkCachedPodOwner is checkOwner for a pod from the cache, which keeps
// the owner annotations.
func (s *Spawner) checkCachedPodOwner(pod *reflector.Pod) error {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	return checkRecordedOwner(s.server, "Pod", pod.Namespace, pod.Name, user, ok, pod.Annotations.Get(naming.AnnotationServername), true)
}

// checkRecordedOwner is checkOwner's rule, on the owner an object's
// annotations record (annotated false when they name no user).
func checkRecordedOwner(want naming.Server, kind, namespace, name, user string, annotated bool, servername string, serverMatters bool) error {
	if !annotated {
		return &CollisionError{Kind: kind, Namespace: namespace, Name: name, Want: want}
	}
	have := naming.Server{Username: user, Servername: servername}
	if have.Username != want.Username || (serverMatters && have.Servername != want.Servername) {
		return &CollisionError{Kind: kind, Namespace: namespace, Name: name, Want: want, Have: &have}
	}
	return nil
}

func (s *Spawner) ensureNamespace(ctx context.Context, obj *corev1.Namespace) error {
	return s.call(ctx, func(ctx context.Context) error {
		_, err := s.b.client.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil // a user namespace is shared by the user's servers
		}
		return err
	})
}

// ensurePVC creates the claim, or reuses an existing one that belongs to
// this server (or to this user, when the claim template does not name the
// server) or that has no owner annotations at all. A claim of another
// user is a *CollisionError: it is never mounted.
func (s *Spawner) ensurePVC(ctx context.Context, run *startRun, obj *corev1.PersistentVolumeClaim) error {
	claims := s.b.client.CoreV1().PersistentVolumeClaims(obj.Namespace)
	serverMatters := s.server.Servername != "" && pvcTemplateNamesServer(s.b.namer.Options().PVCTemplate)
	reuse := func(ctx context.Context) error {
		existing, err := claims.Get(ctx, obj.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errReplaced // gone in between: create it again
		}
		if err != nil {
			return err
		}
		_, annotated := existing.Annotations[naming.AnnotationUsername]
		if annotated {
			if err := s.checkOwner("PersistentVolumeClaim", existing, serverMatters); err != nil {
				return retry.Permanent(err)
			}
		}
		if existing.DeletionTimestamp != nil {
			// A claim on its way out (DeleteForever, or by hand) is never
			// mounted: the server's home would vanish with it. Wait for it
			// to go, then create a new one.
			return fmt.Errorf("%w: %s/%s", errClaimDeleting, existing.Namespace, existing.Name)
		}
		if !annotated {
			return nil // KubeSpawner's or a hand-made claim: a migrating hub keeps its users' homes
		}
		if existing.Annotations[StartIDAnnotation] == run.startID {
			// Our own create landed although the client gave up on it.
			run.claim, run.claimName = existing.UID, existing.Name
		}
		return nil
	}
	return s.call(ctx, func(ctx context.Context) error {
		created, err := claims.Create(ctx, obj, metav1.CreateOptions{})
		switch {
		case err == nil:
			run.claim, run.claimName = created.UID, created.Name
			return nil
		case apierrors.IsAlreadyExists(err):
			return reuse(ctx)
		case apierrors.IsForbidden(err):
			// A quota may forbid creating a claim that already exists.
			if getErr := reuse(ctx); getErr == nil || IsCollision(getErr) || errors.Is(getErr, errClaimDeleting) {
				return getErr
			}
			return retry.Permanent(err)
		}
		return err
	})
}

// legacyPVC implements handle_legacy_names (default true, with
// remember_pvc_name): for a server whose claim is not known yet (no
// PVCName in its State), when no claim exists under today's name but one
// exists under the name an older KubeSpawner gave it (Names.LegacyPVC, the
// escape slug scheme), it returns that name, so the start mounts the
// user's existing home instead of a new empty one. Otherwise it returns
// "". KubeSpawner 7 looks only for servers whose saved state predates
// version 7; spawnkit looks whenever the claim is not known, which finds
// the same claims also for a hub that lost or never had that state.
func (s *Spawner) legacyPVC(ctx context.Context, cfg *kubespawner.Config, want *corev1.PersistentVolumeClaim) (string, error) {
	legacy := s.names.LegacyPVC
	if !boolOr(cfg.HandleLegacyNames, true) || !boolOr(cfg.RememberPVCName, true) ||
		legacy == "" || legacy == want.Name || want.Name != s.names.PVC {
		return "", nil
	}
	claims := s.b.client.CoreV1().PersistentVolumeClaims(want.Namespace)
	exists := func(name string) (bool, error) {
		var found bool
		err := s.call(ctx, func(ctx context.Context) error {
			_, err := claims.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			found = err == nil
			return err
		})
		if err != nil {
			return false, fmt.Errorf("spawner: looking for claim %s/%s (handle_legacy_names): %w", want.Namespace, name, err)
		}
		return found, nil
	}
	if ok, err := exists(want.Name); ok || err != nil {
		return "", err
	}
	if ok, err := exists(legacy); !ok || err != nil {
		return "", err
	}
	return legacy, nil
}

// errClaimDeleting marks a claim that exists but is being deleted: worth
// another try once it is gone.
var errClaimDeleting = errors.New("the claim is being deleted; waiting for it to go before creating it again")

// errReplaced marks a create that found a stale object of the same name
// and deleted it: worth another try.
var errReplaced = errors.New("a stale object of the same name was in the way and has been deleted")

// createPod creates the pod. When the name is taken it reads the pod in
// the way: this start's own (a create that timed out on the client but
// landed) is used; one of an earlier start of this server is stale and
// replaced (deleted with a UID precondition, then the create is tried
// again); anything else is a *CollisionError and nothing is touched.
func (s *Spawner) createPod(ctx context.Context, run *startRun, pods *reflector.Pods, sub *reflector.Subscription, pod *corev1.Pod) (*corev1.Pod, error) {
	api := s.b.client.CoreV1().Pods(pod.Namespace)
	var created *corev1.Pod
	err := s.call(ctx, func(ctx context.Context) error {
		p, err := api.Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			created = p
			return nil
		}
		// Apart, so that its frame is not under the create's (see
		// createAndWait).
		created, err = s.podCreateFailed(ctx, run, api, pods, sub, pod, err)
		return err
	})
	return created, err
}

// podCreateFailed handles a failed create of pod: an AlreadyExists pod
// of this start (a create that landed although the client gave up) is
// the created one; one of an earlier start of this server is deleted and
// the create tried again (errReplaced); another server's is a collision.
func (s *Spawner) podCreateFailed(ctx context.Context, run *startRun, api typedcorev1.PodInterface, pods *reflector.Pods,
	sub *reflector.Subscription, pod *corev1.Pod, err error) (*corev1.Pod, error) {
	if !apierrors.IsAlreadyExists(err) {
		if retryable(err) || ctx.Err() != nil {
			run.createUncertain = true
		}
		return nil, err
	}
	existing, err := api.Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errReplaced // gone in between: try again
	}
	if err != nil {
		return nil, err
	}
	if err := s.checkOwner("Pod", existing, true); err != nil {
		return nil, retry.Permanent(err)
	}
	if existing.Annotations[StartIDAnnotation] == run.startID {
		return existing, nil
	}
	if err := s.deletePod(ctx, pods, sub, existing.Namespace, existing.Name, 0, existing.UID); err != nil {
		return nil, fmt.Errorf("%w; deleting it: %w", errReplaced, err)
	}
	return nil, errReplaced
}

// ensureOwned creates the internal-SSL secret or the service, owned by the
// pod so that the garbage collector removes it with the pod. An old one
// of the same name that belongs to this server (its pod is gone or
// stale) is replaced; one of another server, or one without owner
// annotations, is a *CollisionError.
func (s *Spawner) ensureOwned(ctx context.Context, pod *corev1.Pod, obj interface {
	metav1.Object
}) error {
	obj.SetOwnerReferences([]metav1.OwnerReference{manifest.OwnerReference(pod.Name, pod.UID)})
	var create func(context.Context) error
	var get func(context.Context) (metav1.Object, error)
	var del func(context.Context, types.UID) error
	kind := "Secret"
	switch o := obj.(type) {
	case *corev1.Secret:
		api := s.b.client.CoreV1().Secrets(o.Namespace)
		create = func(ctx context.Context) error { _, err := api.Create(ctx, o, metav1.CreateOptions{}); return err }
		get = func(ctx context.Context) (metav1.Object, error) { return api.Get(ctx, o.Name, metav1.GetOptions{}) }
		del = func(ctx context.Context, uid types.UID) error { return api.Delete(ctx, o.Name, uidPrecondition(uid)) }
	case *corev1.Service:
		kind = "Service"
		api := s.b.client.CoreV1().Services(o.Namespace)
		create = func(ctx context.Context) error { _, err := api.Create(ctx, o, metav1.CreateOptions{}); return err }
		get = func(ctx context.Context) (metav1.Object, error) { return api.Get(ctx, o.Name, metav1.GetOptions{}) }
		del = func(ctx context.Context, uid types.UID) error { return api.Delete(ctx, o.Name, uidPrecondition(uid)) }
	default:
		return fmt.Errorf("spawner: cannot own a %T", obj)
	}
	err := s.call(ctx, func(ctx context.Context) error {
		err := create(ctx)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		existing, err := get(ctx)
		if apierrors.IsNotFound(err) {
			return errReplaced
		}
		if err != nil {
			return err
		}
		for _, ref := range existing.GetOwnerReferences() {
			if ref.UID == pod.UID {
				return nil // ours: a create that landed although the client gave up
			}
		}
		if err := s.checkOwner(kind, existing, true); err != nil {
			if gone, gerr := s.ownerPodsGone(ctx, existing); gerr != nil || !gone {
				return retry.Permanent(err)
			}
			// Another server's, but every pod owning it is gone: the
			// garbage collector's to remove, and in the way now (the
			// name of a stopped server's pod, taken by this one under
			// another template). Deleted as the collector would.
		}
		if err := del(ctx, existing.GetUID()); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		return errReplaced
	})
	if err != nil {
		return fmt.Errorf("%s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// ownerPodsGone reports whether obj is owned by pods only, none of which
// exists any more (not found, or a pod of that name with another UID):
// the garbage collector will delete it. An error reading a pod is
// returned as it is (not gone).
func (s *Spawner) ownerPodsGone(ctx context.Context, obj metav1.Object) (bool, error) {
	refs := obj.GetOwnerReferences()
	if len(refs) == 0 {
		return false, nil
	}
	for _, ref := range refs {
		if ref.Kind != "Pod" || ref.APIVersion != "v1" {
			return false, nil
		}
		p, err := s.b.client.CoreV1().Pods(obj.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, err
		case p.UID == ref.UID:
			return false, nil
		}
	}
	return true, nil
}

func uidPrecondition(uid types.UID) metav1.DeleteOptions {
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}}
}

// deletePod deletes a pod (with a UID precondition when uid is set, so a
// newer pod of the same name is never touched) and waits until the cache
// no longer has it; NotFound and a failed precondition are success.
func (s *Spawner) deletePod(ctx context.Context, pods *reflector.Pods, sub *reflector.Subscription, ns, name string, grace int64, uid types.UID) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(grace)}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: ptr.To(uid)}
	}
	err := s.call(ctx, func(ctx context.Context) error {
		err := s.b.client.CoreV1().Pods(ns).Delete(ctx, name, opts)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.waitPodGone(ctx, pods, sub, ns, name, uid)
}

// waitPodGone waits until the cache has no pod ns/name (with uid, when
// set), woken by the subscription.
func (s *Spawner) waitPodGone(ctx context.Context, pods *reflector.Pods, sub *reflector.Subscription, ns, name string, uid types.UID) error {
	for {
		p, ok, err := pods.Get(ctx, ns, name)
		if err != nil {
			return err
		}
		if !ok || (uid != "" && p.UID != uid) {
			return nil
		}
		select {
		case <-sub.C():
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s/%s to go: %w", ns, name, context.Cause(ctx))
		}
	}
}

// podGone asks the API server whether the pod ns/name of uid is gone.
func (s *Spawner) podGone(ctx context.Context, ns, name string, uid types.UID) (bool, error) {
	var gone bool
	err := s.call(ctx, func(ctx context.Context) error {
		p, err := s.b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone = true
			return nil
		case err != nil:
			return err
		}
		gone = p.UID != uid
		return nil
	})
	return gone, err
}

// cleanupPod deletes the pod a failed or cancelled start created: the one
// it knows by UID, or, when a create's outcome was uncertain, a pod of
// that name carrying this start's id, watched for a while in case the
// create is still landing.
func (s *Spawner) cleanupPod(ctx context.Context, run *startRun) error {
	pods, release, err := s.podsHandleAfterClose(ctx, run.ns)
	if err != nil {
		return err
	}
	defer release()
	sub := s.b.registry.Subscribe(run.ns, run.name)
	defer sub.Close()
	if run.pod != "" {
		return s.deletePod(ctx, pods, sub, run.ns, run.name, 0, run.pod)
	}
	if !run.createUncertain || run.startID == "" {
		return nil
	}
	// A create whose answer was lost may still land: look for it for up
	// to one request timeout.
	deadline := s.b.clock.After(s.b.cfg.K8sAPIRequestTimeout.Duration() + 2*time.Second)
	for {
		var found *corev1.Pod
		err := s.call(ctx, func(ctx context.Context) error {
			p, err := s.b.client.CoreV1().Pods(run.ns).Get(ctx, run.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil && p.Annotations[StartIDAnnotation] == run.startID {
				found = p
			}
			return err
		})
		if err != nil {
			return err
		}
		if found != nil {
			return s.deletePod(ctx, pods, sub, run.ns, run.name, 0, found.UID)
		}
		select {
		case <-sub.C():
		case <-deadline:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// podsHandleAfterClose is podsHandle, except that after Close (whose
// cancellation a cleanup is finishing) it takes a short-lived hold of its
// own; the caller calls release when done.
func (s *Spawner) podsHandleAfterClose(ctx context.Context, ns string) (*reflector.Pods, func(), error) {
	p, err := s.podsHandle(ctx, ns)
	if errors.Is(err, ErrClosed) {
		if s.b.watchAll {
			ns = metav1.NamespaceAll // the informer podsHandle would take
		}
		p, err = s.b.registry.Pods(ctx, ns)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Release, nil
	}
	return p, func() {}, err
}

func (s *Spawner) deleteClaim(ctx context.Context, ns, name string, uid types.UID) error {
	return s.call(ctx, func(ctx context.Context) error {
		err := s.b.client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, uidPrecondition(uid))
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	})
}

// ensureNetworkPolicy makes the user namespace's NetworkPolicy, or brings
// an existing one of spawnkit's up to date with an update (not a delete
// and create: that would leave the servers open in between), and to the
// cluster label of a Factory with a cluster. One of the name that
// spawnkit did not make is a *CollisionError and is not touched.
func (s *Spawner) ensureNetworkPolicy(ctx context.Context, want *networkingv1.NetworkPolicy) error {
	api := s.b.client.NetworkingV1().NetworkPolicies(want.Namespace)
	err := s.call(ctx, func(ctx context.Context) error {
		_, err := api.Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if have.Labels[naming.LabelManagedBy] != naming.ManagedBySpawnkit {
			return retry.Permanent(&CollisionError{Kind: "NetworkPolicy", Namespace: have.Namespace, Name: have.Name, Want: s.server})
		}
		if apiequality.Semantic.DeepEqual(have.Spec, want.Spec) && hasClusterLabel(have.Labels, want.Labels) {
			return nil
		}
		up := have.DeepCopy()
		up.Spec = want.Spec
		up.Labels = withClusterLabel(up.Labels, want.Labels)
		_, err = api.Update(ctx, up, metav1.UpdateOptions{})
		return err // a Conflict is retried: another start updated it first
	})
	if err != nil {
		return fmt.Errorf("NetworkPolicy %s/%s: %w", want.Namespace, want.Name, err)
	}
	return nil
}

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

// hasClusterLabel reports whether the labels have of an existing object
// carry the cluster label of want (an object's labels as rendered), or
// want has none.
func hasClusterLabel(have, want map[string]string) bool {
	c, ok := want[naming.LabelCluster]
	return !ok || have[naming.LabelCluster] == c
}

// withClusterLabel is have, a copy's own labels, with want's cluster
// label when it has one: an update of an object made before its hub had
// several clusters names the cluster from then on.
func withClusterLabel(have, want map[string]string) map[string]string {
	c, ok := want[naming.LabelCluster]
	if !ok {
		return have
	}
	if have == nil {
		have = map[string]string{}
	}
	have[naming.LabelCluster] = c
	return have
}
