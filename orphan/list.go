package orphan

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// DefaultSelector finds spawnkit's objects.
const DefaultSelector = naming.LabelManagedBy + "=" + naming.ManagedBySpawnkit

// Options configure List. Client is required.
type Options struct {
	Client kubernetes.Interface
	// Namespaces to look in; empty means all (needed for user namespaces).
	Namespaces []string
	// Kinds to look at; empty means AllKinds. A kind not in AllKinds is
	// an error.
	Kinds []Kind
	// LabelSelector finds the objects. Default: DefaultSelector. A hub
	// taking over from KubeSpawner can pass
	// "app.kubernetes.io/managed-by=kubespawner" to find its objects too
	// (KubeSpawner 7 writes the same user and server annotations).
	LabelSelector string
	// PageSize bounds each LIST page. Default: 500.
	PageSize int64
	// Registry, when set, serves the pods from a shared informer it
	// already runs and has synced instead of a LIST: the informer for the
	// namespace, or the all-namespaces one (which alone serves "all
	// namespaces"). Its pod label selector must cover spawnkit's pods.
	// List never starts an informer: without a held one the pods are
	// listed. The other kinds are always listed.
	Registry *reflector.Registry
	// Cluster names the cluster Client talks to, as the hub names it in
	// Known.AddIn. List sets it as every orphan's Cluster, and judges with
	// it in mind: a pod, secret or service of a server the hub records in
	// another cluster is an orphan (ReasonOtherCluster). Default "": one
	// cluster, where the placements Known records are not consulted.
	Cluster string
}

// List finds the objects no known server owns. Objects are found by
// label, not by re-rendering today's name templates, and attributed by the
// raw names in their annotations, so objects named by an old template or
// living in an old namespace are found too. Objects without the label are
// never looked at. Each kind costs one paginated LIST per namespace, but
// for pods served by Options.Registry.
func List(ctx context.Context, known *Known, opts Options) ([]Orphan, error) {
	if opts.Client == nil {
		return nil, fmt.Errorf("orphan: Options needs a Client")
	}
	if known == nil {
		return nil, fmt.Errorf("%w: List needs the known servers (nil Known)", ErrInvalidOptions)
	}
	if err := checkKinds("Options.Kinds", opts.Kinds); err != nil {
		return nil, err
	}
	if opts.LabelSelector == "" {
		opts.LabelSelector = DefaultSelector
	}
	if opts.PageSize == 0 {
		opts.PageSize = 500
	}
	kinds := opts.Kinds
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	namespaces := opts.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	in := newInventory(known, kinds)
	in.cluster = opts.Cluster
	// Pods are read even when not asked for: secrets, services and
	// namespaces are judged by them.
	for _, ns := range namespaces {
		if err := podsInto(ctx, opts, ns, in); err != nil {
			return nil, err
		}
		for _, k := range kinds {
			if k != KindPod && k != KindNamespace {
				if err := listInto(ctx, opts, ns, k, in); err != nil {
					return nil, err
				}
			}
		}
	}
	if slices.Contains(kinds, KindNamespace) {
		if err := listInto(ctx, opts, metav1.NamespaceAll, KindNamespace, in); err != nil {
			return nil, err
		}
	}
	return in.orphans(), nil
}

// inventory is what List found, reduced to what the diff needs. A pod
// needs only the known servers to be judged, so pods are judged as they
// are read: each of 100,000 cached pods is visited once, while it is in
// the CPU's cache. The other kinds are judged at the end, by the pods.
type inventory struct {
	known *Known
	kinds []Kind
	// cluster is the one listed (Options.Cluster).
	cluster string
	// judgePods says whether pods are asked for; byPods whether some kind
	// asked for is judged by the pods, which are then kept in pods.
	judgePods, byPods bool
	objects           []object // listed objects; their pods are judged already
	pods              []podRef // the live pods, when byPods
	found             []verdict
}

func newInventory(known *Known, kinds []Kind) *inventory {
	return &inventory{
		known: known, kinds: kinds, judgePods: slices.Contains(kinds, KindPod),
		byPods: slices.ContainsFunc(kinds, func(k Kind) bool { return k != KindPod && k != KindPVC }),
	}
}

// seePod judges a pod that is not being deleted, and keeps it when other
// kinds are judged by the pods.
func (in *inventory) seePod(p podRef, v verdict) {
	if in.byPods {
		in.pods = append(in.pods, p)
	}
	if in.judgePods {
		if v.reason = judgePod(in.known, in.cluster, p.key, p.attributed); v.reason != "" {
			in.found = append(in.found, v)
		}
	}
}

type object struct {
	kind       Kind
	meta       objectMeta
	ownerPods  []types.UID // pod owner references
	attributed bool
	key        ServerKey
}

// objectMeta is the part of an object's metadata the diff reads: a
// quarter of metav1.ObjectMeta's size, which matters at 100,000 objects.
type objectMeta struct {
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
	Created         time.Time
	Deleting        bool
}

func listInto(ctx context.Context, opts Options, ns string, kind Kind, in *inventory) error {
	core := opts.Client.CoreV1()
	var list func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error)
	switch kind {
	case KindPod:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Pods(ns).List(ctx, o)
		}
	case KindPVC:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.PersistentVolumeClaims(ns).List(ctx, o)
		}
	case KindSecret:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Secrets(ns).List(ctx, o)
		}
	case KindService:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Services(ns).List(ctx, o)
		}
	case KindNamespace:
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Namespaces().List(ctx, o)
		}
	default:
		return fmt.Errorf("orphan: unknown kind %q", kind)
	}
	p := pager.New(pager.SimplePageFunc(func(o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) }))
	p.PageSize = opts.PageSize
	err := p.EachListItemWithAlloc(ctx, metav1.ListOptions{LabelSelector: opts.LabelSelector}, func(obj runtime.Object) error {
		m, err := metaOf(obj)
		if err != nil {
			return err
		}
		in.add(kind, m)
		return nil
	})
	if err != nil {
		where := ns
		if where == "" {
			where = "all namespaces"
		}
		return fmt.Errorf("orphan: listing %ss in %s: %w", strings.ToLower(string(kind)), where, err)
	}
	return nil
}

// add records an object by its metadata.
func (in *inventory) add(kind Kind, m metav1.ObjectMeta) {
	o := object{kind: kind, meta: objectMeta{Namespace: m.Namespace, Name: m.Name, UID: m.UID,
		ResourceVersion: m.ResourceVersion, Created: m.CreationTimestamp.Time, Deleting: m.DeletionTimestamp != nil}}
	for _, ref := range m.OwnerReferences {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" {
			o.ownerPods = append(o.ownerPods, ref.UID)
		}
	}
	if user, ok := m.Annotations[naming.AnnotationUsername]; ok && user != "" {
		o.attributed = true
		o.key = ServerKey{User: user, Server: m.Annotations[naming.AnnotationServername]}
	}
	in.objects = append(in.objects, o)
	if kind == KindPod && !o.meta.Deleting {
		in.seePod(podRef{o.meta.UID, o.meta.Namespace, o.key, o.attributed},
			verdict{namespace: o.meta.Namespace, name: o.meta.Name, obj: int32(len(in.objects) - 1), kind: kindOrder(KindPod)})
	}
}

// podsInto reads the pods of ns from a synced pod informer the registry
// already runs, if there is one: the informer for ns, or the one for all
// namespaces. Otherwise it lists them: starting an informer only to read
// it once and stop it would cost the same LIST and a watch besides.
func podsInto(ctx context.Context, opts Options, ns string, in *inventory) error {
	if opts.Registry == nil {
		return listInto(ctx, opts, ns, KindPod, in)
	}
	held, ok := heldPodInformer(opts.Registry, ns)
	if !ok {
		return listInto(ctx, opts, ns, KindPod, in)
	}
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return fmt.Errorf("orphan: label selector %q: %w", opts.LabelSelector, err)
	}
	pods, err := opts.Registry.Pods(ctx, held)
	if err != nil {
		return err
	}
	defer pods.Release()
	list, err := pods.List(ctx, ns)
	if err != nil {
		return fmt.Errorf("orphan: reading pods from the shared cache: %w", err)
	}
	// Matching the selector, reading the owner and judging happen in one
	// pass: a second pass over 100,000 pods would miss the CPU's cache
	// as often as the first. The pass is memory-bound, so a large cache
	// is split among the cores, each judging a part into a sink of its
	// own; the sinks are joined in order.
	sinks := make([]podSink, numParts(len(list)))
	sinks[0] = podSink{found: in.found, pods: in.pods}
	inParts(len(list), len(sinks), func(part, lo, hi int) { sinks[part].judge(in, list[lo:hi], sel) })
	in.found, in.pods = sinks[0].found, sinks[0].pods
	for _, sink := range sinks[1:] {
		in.found = append(in.found, sink.found...)
		in.pods = append(in.pods, sink.pods...)
	}
	return nil
}

// podSink collects what judging cached pods finds.
type podSink struct {
	found []verdict
	pods  []podRef
}

// judge judges the pods of list that sel matches. It only reads in.
func (s *podSink) judge(in *inventory, list []*reflector.Pod, sel labels.Selector) {
	if in.byPods {
		s.pods = slices.Grow(s.pods, len(list))
	}
	podKind := kindOrder(KindPod)
	for _, p := range list {
		// &p.Labels: a pointer in the interface, where the slice would be
		// copied to the heap for every pod.
		if p.DeletionTimestamp != nil || !sel.Matches(&p.Labels) {
			continue
		}
		key, attributed := cachedOwner(p)
		if in.byPods {
			s.pods = append(s.pods, podRef{p.UID, p.Namespace, key, attributed})
		}
		if in.judgePods {
			if reason := judgePod(in.known, in.cluster, key, attributed); reason != "" {
				s.found = append(s.found, verdict{namespace: p.Namespace, name: p.Name, pod: p, kind: podKind, reason: reason})
			}
		}
	}
}

// cachedOwner is the server a cached pod's annotations name.
func cachedOwner(p *reflector.Pod) (ServerKey, bool) {
	if user, ok := p.Annotations.Lookup(naming.AnnotationUsername); ok && user != "" {
		return ServerKey{User: user, Server: p.Annotations.Get(naming.AnnotationServername)}, true
	}
	return ServerKey{}, false
}

// heldPodInformer returns the namespace of a synced pod informer of r
// that covers ns: ns's own, else the all-namespaces one. Another holder
// may release it before List acquires it; the informer then restarts
// and lists, which is correct, only slower.
func heldPodInformer(r *reflector.Registry, ns string) (string, bool) {
	status := r.Status()
	for _, candidate := range []string{ns, metav1.NamespaceAll} {
		key := reflector.Key{Resource: reflector.ResourcePods, Namespace: candidate, LabelSelector: r.PodLabelSelector()}
		if s, ok := status[key]; ok && s.Synced {
			return candidate, true
		}
	}
	return "", false
}

// metaOf keeps only the metadata of a listed object.
func metaOf(obj runtime.Object) (metav1.ObjectMeta, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return o.ObjectMeta, nil
	case *corev1.PersistentVolumeClaim:
		return o.ObjectMeta, nil
	case *corev1.Secret:
		return o.ObjectMeta, nil
	case *corev1.Service:
		return o.ObjectMeta, nil
	case *corev1.Namespace:
		return o.ObjectMeta, nil
	}
	return metav1.ObjectMeta{}, fmt.Errorf("orphan: unexpected object %T", obj)
}
