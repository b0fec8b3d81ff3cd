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

// Kind is a kind of object spawnkit creates.
type Kind string

const (
	KindPod       Kind = "Pod"
	KindPVC       Kind = "PersistentVolumeClaim"
	KindSecret    Kind = "Secret"
	KindService   Kind = "Service"
	KindNamespace Kind = "Namespace"
)

// AllKinds are the kinds List looks at by default.
var AllKinds = []Kind{KindPod, KindPVC, KindSecret, KindService, KindNamespace}

// Reason says why an object is an orphan.
type Reason string

const (
	// ReasonServerUnknown: the object belongs to a server the hub does not
	// know.
	ReasonServerUnknown Reason = "server-unknown"
	// ReasonServerNotRunning: a pod of a server the hub believes stopped.
	ReasonServerNotRunning Reason = "server-not-running"
	// ReasonOwnerGone: a secret or service whose pod is gone.
	ReasonOwnerGone Reason = "owner-pod-gone"
	// ReasonUserUnknown: a claim or an empty user namespace of a user the
	// hub does not know at all.
	ReasonUserUnknown Reason = "user-unknown"
	// ReasonUnattributed: spawnkit's label without the annotations that
	// name the server; reported, never deleted by default.
	ReasonUnattributed Reason = "unattributed"
)

// ServerKey names a server: the raw user and server names ("" is the
// default server).
type ServerKey struct{ User, Server string }

func (k ServerKey) String() string {
	if k.Server == "" {
		return k.User
	}
	return k.User + "/" + k.Server
}

// Known is the caller's set of servers. It is cheap to build for 100,000
// servers (two map entries each). Not safe for concurrent writes.
type Known struct {
	servers map[ServerKey]bool // running or not
	users   map[string]struct{}
}

// NewKnown returns an empty set; size is a hint.
func NewKnown(size int) *Known {
	return &Known{servers: make(map[ServerKey]bool, size), users: make(map[string]struct{}, size)}
}

// Add records a server the hub knows, and whether it should be running.
func (k *Known) Add(user, server string, running bool) {
	k.servers[ServerKey{user, server}] = running
	k.users[user] = struct{}{}
}

// Len is the number of servers.
func (k *Known) Len() int { return len(k.servers) }

// Orphan is an object no known server owns.
type Orphan struct {
	Kind            Kind
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
	// Server is the server the object belongs to, from its annotations;
	// Attributed is false when they are missing.
	Server     ServerKey
	Attributed bool
	Reason     Reason
	Created    time.Time
}

// Age is how old the object is at now.
func (o Orphan) Age(now time.Time) time.Duration { return now.Sub(o.Created) }

func (o Orphan) String() string {
	ns := o.Namespace
	if ns != "" {
		ns += "/"
	}
	return fmt.Sprintf("%s %s%s (%s, %s)", o.Kind, ns, o.Name, o.Server, o.Reason)
}

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
	in := &inventory{}
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
	return diff(known, in, kinds), nil
}

// inventory is what List found, reduced to what the diff needs.
type inventory struct {
	objects []object
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
	in.objects = slices.Grow(in.objects, len(list))
	for _, p := range list {
		if sel.Matches(p.Labels) {
			in.addCachedPod(p)
		}
	}
	return nil
}

// addCachedPod records a pod from the shared cache, which keeps all that
// the diff reads of a pod: its names, uid, resourceVersion, timestamps
// and owner annotations (a pod's own owner references are never read).
func (in *inventory) addCachedPod(p *reflector.Pod) {
	o := object{kind: KindPod, meta: objectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		ResourceVersion: p.ResourceVersion, Created: p.CreationTimestamp.Time, Deleting: p.DeletionTimestamp != nil}}
	if user, ok := p.Annotations.Lookup(naming.AnnotationUsername); ok && user != "" {
		o.attributed = true
		o.key = ServerKey{User: user, Server: p.Annotations.Get(naming.AnnotationServername)}
	}
	in.objects = append(in.objects, o)
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

// diff decides, per object, whether a known server owns it. It visits
// each object once; the pod indexes that secrets, services and namespaces
// are judged by are built, presized, only as far as such objects need them,
// and the orphans are sorted by kind, namespace and name without building
// a string per object.
func diff(known *Known, in *inventory, kinds []Kind) []Orphan {
	type verdict struct {
		i      int32
		reason Reason
	}
	wantPods := slices.Contains(kinds, KindPod)
	var found []verdict
	pods := make([]int32, 0, len(in.objects)) // by index into in.objects
	var others []int32
	var need podIndexNeeds
	for i := range in.objects {
		o := &in.objects[i]
		if o.meta.Deleting {
			continue
		}
		if o.kind != KindPod {
			if slices.Contains(kinds, o.kind) {
				others = append(others, int32(i))
				need.add(o)
			}
			continue
		}
		pods = append(pods, int32(i))
		if !wantPods {
			continue
		}
		if reason := judgePod(known, o); reason != "" {
			found = append(found, verdict{int32(i), reason})
		}
	}
	if len(others) > 0 {
		idx := newPodIndex(in, pods, need)
		for _, i := range others {
			if reason := judge(known, &in.objects[i], idx); reason != "" {
				found = append(found, verdict{i, reason})
			}
		}
	}
	slices.SortFunc(found, func(a, b verdict) int {
		x, y := &in.objects[a.i], &in.objects[b.i]
		if c := strings.Compare(string(x.kind), string(y.kind)); c != 0 {
			return c
		}
		if c := strings.Compare(x.meta.Namespace, y.meta.Namespace); c != 0 {
			return c
		}
		return strings.Compare(x.meta.Name, y.meta.Name)
	})
	if len(found) == 0 {
		return nil
	}
	out := make([]Orphan, len(found))
	for j, v := range found {
		o := &in.objects[v.i]
		out[j] = Orphan{
			Kind: o.kind, Namespace: o.meta.Namespace, Name: o.meta.Name, UID: o.meta.UID,
			ResourceVersion: o.meta.ResourceVersion, Server: o.key, Attributed: o.attributed,
			Reason: v.reason, Created: o.meta.Created,
		}
	}
	return out
}

// podIndex is what secrets, services and namespaces are judged by: the
// live pods by UID, by server and by namespace.
type podIndex struct {
	byUID       map[types.UID]struct{}
	byServer    map[ServerKey]struct{}
	byNamespace map[string]struct{}
}

// podIndexNeeds says which of podIndex's maps the objects to judge read.
type podIndexNeeds struct{ uid, server, namespace bool }

func (n *podIndexNeeds) add(o *object) {
	switch {
	case o.kind == KindNamespace:
		n.namespace = true
	case o.kind != KindSecret && o.kind != KindService:
	case len(o.ownerPods) > 0:
		n.uid = true
	default:
		n.server = true
	}
}

// newPodIndex builds, presized, the maps that need asks for; the others
// stay nil (reading a nil map finds nothing, and nothing reads them).
func newPodIndex(in *inventory, pods []int32, need podIndexNeeds) podIndex {
	var idx podIndex
	if need.uid {
		idx.byUID = make(map[types.UID]struct{}, len(pods))
	}
	if need.server {
		idx.byServer = make(map[ServerKey]struct{}, len(pods))
	}
	if need.namespace {
		idx.byNamespace = map[string]struct{}{}
	}
	for _, i := range pods {
		o := &in.objects[i]
		if need.uid {
			idx.byUID[o.meta.UID] = struct{}{}
		}
		if need.namespace {
			idx.byNamespace[o.meta.Namespace] = struct{}{}
		}
		if need.server && o.attributed {
			idx.byServer[o.key] = struct{}{}
		}
	}
	return idx
}

// judgePod needs only the known servers.
func judgePod(known *Known, o *object) Reason {
	if !o.attributed {
		return ReasonUnattributed
	}
	running, serverKnown := known.servers[o.key]
	switch {
	case !serverKnown:
		return ReasonServerUnknown
	case !running:
		return ReasonServerNotRunning
	}
	return ""
}

func judge(known *Known, o *object, pods podIndex) Reason {
	if !o.attributed {
		return ReasonUnattributed
	}
	switch o.kind {
	case KindPod:
		return judgePod(known, o)
	case KindPVC:
		// A claim belongs to the user, not to a running server.
		if _, userKnown := known.users[o.key.User]; !userKnown {
			return ReasonUserUnknown
		}
	case KindSecret, KindService:
		if _, serverKnown := known.servers[o.key]; !serverKnown {
			return ReasonServerUnknown
		}
		if len(o.ownerPods) > 0 {
			for _, uid := range o.ownerPods {
				if _, live := pods.byUID[uid]; live {
					return ""
				}
			}
			return ReasonOwnerGone
		}
		if _, live := pods.byServer[o.key]; !live {
			return ReasonOwnerGone
		}
	case KindNamespace:
		_, userKnown := known.users[o.key.User]
		if _, hasPods := pods.byNamespace[o.meta.Name]; !userKnown && !hasPods {
			return ReasonUserUnknown
		}
	}
	return ""
}
