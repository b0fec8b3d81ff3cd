package spawner

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		if existing.Annotations[naming.AnnotationStartID] == run.startID {
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
		created, err = s.podCreateFailed(ctx, run, api, podWatch{pods: pods, sub: sub, ns: pod.Namespace, name: pod.Name}, err)
		return err
	})
	return created, err
}

// podCreateFailed handles a failed create of the pod w names: an
// AlreadyExists pod of this start (a create that landed although the
// client gave up) is the created one; one of an earlier start of this
// server is deleted and the create tried again (errReplaced); another
// server's is a collision.
func (s *Spawner) podCreateFailed(ctx context.Context, run *startRun, api typedcorev1.PodInterface, w podWatch, err error) (*corev1.Pod, error) {
	if !apierrors.IsAlreadyExists(err) {
		if retryable(err) || ctx.Err() != nil {
			run.createUncertain = true
		}
		return nil, err
	}
	existing, err := api.Get(ctx, w.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, errReplaced // gone in between: try again
	}
	if err != nil {
		return nil, err
	}
	if err := s.checkOwner("Pod", existing, true); err != nil {
		return nil, retry.Permanent(err)
	}
	if existing.Annotations[naming.AnnotationStartID] == run.startID {
		return existing, nil
	}
	if err := s.deletePod(ctx, w, 0, existing.UID); err != nil {
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

// hasClusterLabel reports whether the labels have of an existing object
// carry the cluster label of want (an object's labels as rendered) under
// its current key, or want has none. An object that names its cluster only
// under naming.LegacyLabelCluster does not: its next update moves the key.
func hasClusterLabel(have, want map[string]string) bool {
	c, ok := want[naming.LabelCluster]
	if !ok {
		return true
	}
	got, ok := have[naming.LabelCluster]
	_, legacy := have[naming.LegacyLabelCluster]
	return ok && got == c && !legacy
}

// withClusterLabel is have, a copy's own labels, with want's cluster
// label when it has one: an update of an object made before its hub had
// several clusters names the cluster from then on, and one written under
// the legacy key is moved to the current one.
func withClusterLabel(have, want map[string]string) map[string]string {
	c, ok := want[naming.LabelCluster]
	if !ok {
		return have
	}
	if have == nil {
		have = map[string]string{}
	}
	delete(have, naming.LegacyLabelCluster)
	have[naming.LabelCluster] = c
	return have
}
