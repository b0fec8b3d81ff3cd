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
	// Registry, when set, serves the pods from its shared informers (its
	// pod label selector must cover spawnkit's pods) instead of a LIST;
	// the other kinds are always listed.
	Registry *reflector.Registry
}

// List finds the objects no known server owns. Objects are found by
// label, not by re-rendering today's name templates, and attributed by the
// raw names in their annotations, so objects named by an old template or
// living in an old namespace are found too. Objects without the label are
// never looked at. Each kind costs one paginated LIST per namespace.
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
	// Pods are listed even when not asked for: secrets, services and
	// namespaces are judged by them.
	for _, ns := range namespaces {
		if opts.Registry != nil {
			if err := podsFromRegistry(ctx, opts, ns, in); err != nil {
				return nil, err
			}
		} else if err := listInto(ctx, opts, ns, KindPod, in); err != nil {
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
	meta       metav1.ObjectMeta
	ownerPods  []types.UID // pod owner references
	attributed bool
	key        ServerKey
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
	o := object{kind: kind, meta: m}
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

// podsFromRegistry reads the pods of ns from the registry's shared
// informer (after its first sync), filtered by the label selector.
func podsFromRegistry(ctx context.Context, opts Options, ns string, in *inventory) error {
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return fmt.Errorf("orphan: label selector %q: %w", opts.LabelSelector, err)
	}
	pods, err := opts.Registry.Pods(ctx, ns)
	if err != nil {
		return err
	}
	defer pods.Release()
	list, err := pods.List(ctx, metav1.NamespaceAll)
	if err != nil {
		return fmt.Errorf("orphan: reading pods from the shared cache: %w", err)
	}
	for _, p := range list {
		if sel.Matches(labels.Set(p.Labels)) {
			in.add(KindPod, p.ObjectMeta)
		}
	}
	return nil
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

// diff decides, per object, whether a known server owns it.
func diff(known *Known, in *inventory, kinds []Kind) []Orphan {
	livePods := map[types.UID]bool{}
	podsByServer := map[ServerKey]bool{}
	podsByNamespace := map[string]bool{}
	for _, o := range in.objects {
		if o.kind == KindPod && o.meta.DeletionTimestamp == nil {
			livePods[o.meta.UID] = true
			podsByNamespace[o.meta.Namespace] = true
			if o.attributed {
				podsByServer[o.key] = true
			}
		}
	}
	var out []Orphan
	for _, o := range in.objects {
		if !slices.Contains(kinds, o.kind) || o.meta.DeletionTimestamp != nil {
			continue
		}
		reason := judge(known, o, livePods, podsByServer, podsByNamespace)
		if reason == "" {
			continue
		}
		out = append(out, Orphan{
			Kind: o.kind, Namespace: o.meta.Namespace, Name: o.meta.Name, UID: o.meta.UID,
			ResourceVersion: o.meta.ResourceVersion, Server: o.key, Attributed: o.attributed,
			Reason: reason, Created: o.meta.CreationTimestamp.Time,
		})
	}
	slices.SortFunc(out, func(a, b Orphan) int {
		return strings.Compare(string(a.Kind)+"/"+a.Namespace+"/"+a.Name, string(b.Kind)+"/"+b.Namespace+"/"+b.Name)
	})
	return out
}

func judge(known *Known, o object, livePods map[types.UID]bool, podsByServer map[ServerKey]bool, podsByNamespace map[string]bool) Reason {
	if !o.attributed {
		return ReasonUnattributed
	}
	running, serverKnown := known.servers[o.key]
	_, userKnown := known.users[o.key.User]
	switch o.kind {
	case KindPod:
		switch {
		case !serverKnown:
			return ReasonServerUnknown
		case !running:
			return ReasonServerNotRunning
		}
	case KindPVC:
		// A claim belongs to the user, not to a running server.
		if !userKnown {
			return ReasonUserUnknown
		}
	case KindSecret, KindService:
		if !serverKnown {
			return ReasonServerUnknown
		}
		if len(o.ownerPods) > 0 {
			for _, uid := range o.ownerPods {
				if livePods[uid] {
					return ""
				}
			}
			return ReasonOwnerGone
		}
		if !podsByServer[o.key] {
			return ReasonOwnerGone
		}
	case KindNamespace:
		if !userKnown && !podsByNamespace[o.meta.Name] {
			return ReasonUserUnknown
		}
	}
	return ""
}
