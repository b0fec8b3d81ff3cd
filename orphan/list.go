package orphan

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

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
	// ReasonOtherCluster: a pod, secret or service of a known server that
	// the hub records in another cluster than the one listed
	// (Options.Cluster): what moving the server leaves behind.
	// Orphan.ServerCluster names the cluster the server lives in.
	ReasonOtherCluster Reason = "other-cluster"
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
// servers (two map entries each, three for a server placed in a cluster).
// Not safe for concurrent writes; List reads it from several goroutines.
type Known struct {
	servers map[ServerKey]bool // running or not
	users   map[string]struct{}
	// clusters holds the cluster of each server AddIn placed in one; nil
	// until one is. clusterNames interns the clusters' names.
	clusters     map[ServerKey]string
	clusterNames map[string]string
	// names holds the keys' strings, copied together: a lookup compares
	// the key it finds with the one asked for, and 100,000 names side by
	// side stay in the CPU's cache where the caller's scattered strings
	// would each be a miss.
	names []byte
}

// NewKnown returns an empty set; size is a hint.
func NewKnown(size int) *Known {
	return &Known{servers: make(map[ServerKey]bool, size), users: make(map[string]struct{}, size)}
}

// Add records a server the hub knows, and whether it should be running,
// without saying in which cluster it lives: it is AddIn("", ...).
func (k *Known) Add(user, server string, running bool) { k.AddIn("", user, server, running) }

// AddIn records a server the hub knows, whether it should be running, and
// the cluster it lives in, as List is told it by Options.Cluster. Cluster
// "" means the placement is unknown (say a split brain the hub has not
// resolved): such a server counts as living in every cluster. Adding a
// server again updates whether it runs and where.
func (k *Known) AddIn(cluster, user, server string, running bool) {
	key := ServerKey{user, server}
	if old, ok := k.servers[key]; ok {
		if old != running {
			k.servers[key] = running
		}
		k.place(key, cluster)
		return
	}
	user = k.copy(user)
	if _, ok := k.users[user]; !ok {
		k.users[user] = struct{}{}
	}
	key = ServerKey{user, k.copy(server)}
	k.servers[key] = running
	k.place(key, cluster)
}

// copy returns s copied into k.names.
func (k *Known) copy(s string) string {
	if s == "" {
		return ""
	}
	if cap(k.names)-len(k.names) < len(s) {
		// A new block: the strings in the old one stay where they are.
		k.names = make([]byte, 0, max(64<<10, len(s)))
	}
	start := len(k.names)
	k.names = append(k.names, s...)
	return unsafe.String(&k.names[start], len(s))
}

// Len is the number of servers.
func (k *Known) Len() int { return len(k.servers) }

// Orphan is an object no known server owns.
type Orphan struct {
	// Cluster is the cluster the object was listed in (Options.Cluster);
	// Cleanup deletes it only through that cluster's client.
	Cluster         string
	Kind            Kind
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
	// Server is the server the object belongs to, from its annotations;
	// Attributed is false when they are missing.
	Server     ServerKey
	Attributed bool
	Reason     Reason
	// ServerCluster is, for ReasonOtherCluster, the cluster the hub
	// records the server in; "" otherwise.
	ServerCluster string
	Created       time.Time
}

// Age is how old the object is at now.
func (o Orphan) Age(now time.Time) time.Duration { return now.Sub(o.Created) }

func (o Orphan) String() string {
	ns := o.Namespace
	if ns != "" {
		ns += "/"
	}
	where := ""
	if o.Cluster != "" {
		where = " in cluster " + o.Cluster
	}
	reason := string(o.Reason)
	if o.ServerCluster != "" {
		reason += ": lives in " + o.ServerCluster
	}
	return fmt.Sprintf("%s %s%s%s (%s, %s)", o.Kind, ns, o.Name, where, o.Server, reason)
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

// podRef is what secrets, services and namespaces are judged by of a pod.
type podRef struct {
	uid        types.UID
	namespace  string
	key        ServerKey
	attributed bool
}

// verdict is an orphan found: the object (a listed one by index, or a
// cached pod) and its reason, with the fields orphans are sorted by held
// inline, so that sorting 100,000 of them chases no pointer but the
// names' bytes.
type verdict struct {
	namespace, name string
	pod             *reflector.Pod // a cached pod, or nil
	obj             int32          // otherwise the index of a listed object
	kind            uint8          // kindOrder
	reason          Reason
	abbrev          uint64 // sortVerdicts' abbreviated key of name
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

// kindOrder is k's place among the kinds in alphabetical order, the
// order orphans have always been sorted in (Namespace,
// PersistentVolumeClaim, Pod, Secret, Service).
func kindOrder(k Kind) uint8 { return uint8(slices.Index(kindsByName, k)) }

var kindsByName = slices.Sorted(slices.Values(AllKinds))

// sortVerdicts returns vs in order of kind, namespace and name. Parts of
// vs are sorted at once (inParts), then merged. Names are compared by an
// abbreviated key first (PostgreSQL's trick): the eight bytes after the
// prefix all the names share ("jupyter-" at least), as a number held in
// the verdict, so that most comparisons read no name.
func sortVerdicts(vs []verdict) []*verdict {
	// The shared prefix: each part's, then theirs.
	prefixes := make([]string, numParts(len(vs)))
	inParts(len(vs), len(prefixes), func(part, lo, hi int) { prefixes[part] = sharedPrefix(vs[lo:hi]) })
	common := prefixes[0]
	for _, p := range prefixes[1:] {
		common = common[:commonLen(common, p)]
	}
	skip := len(common)
	runs := make([][]verdict, len(prefixes))
	inParts(len(vs), len(runs), func(part, lo, hi int) {
		run := vs[lo:hi]
		for i := range run {
			run[i].abbrev = abbreviate(run[i].name, skip)
		}
		slices.SortFunc(run, func(a, b verdict) int { return compareVerdicts(&a, &b) })
		runs[part] = run
	})
	out := make([]*verdict, 0, len(vs))
	if len(runs) == 1 {
		for i := range runs[0] {
			out = append(out, &runs[0][i])
		}
		return out
	}
	for {
		best := -1
		for r, run := range runs {
			if len(run) > 0 && (best < 0 || compareVerdicts(&run[0], &runs[best][0]) < 0) {
				best = r
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, &runs[best][0])
		runs[best] = runs[best][1:]
	}
}

// compareVerdicts orders by kind, namespace and name, reading the names
// only when their abbreviated keys are equal.
func compareVerdicts(a, b *verdict) int {
	if a.kind != b.kind {
		return int(a.kind) - int(b.kind)
	}
	if c := strings.Compare(a.namespace, b.namespace); c != 0 {
		return c
	}
	if a.abbrev != b.abbrev {
		if a.abbrev < b.abbrev {
			return -1
		}
		return 1
	}
	return strings.Compare(a.name, b.name)
}

// sharedPrefix is the longest prefix of every name in vs.
func sharedPrefix(vs []verdict) string {
	if len(vs) == 0 {
		return ""
	}
	common := vs[0].name
	for _, v := range vs[1:] {
		common = common[:commonLen(common, v.name)]
	}
	return common
}

func commonLen(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// abbreviate is up to eight bytes of name from skip on, big-endian and
// zero-padded: keys order as the names do, and equal keys leave the
// order to the names themselves.
func abbreviate(name string, skip int) uint64 {
	var k uint64
	for i := range 8 {
		k <<= 8
		if j := skip + i; j < len(name) {
			k |= uint64(name[j])
		}
	}
	return k
}

// orphans judges the objects other than pods by the pods, and returns
// every orphan found, sorted by kind, namespace and name. The pod indexes
// are built, presized, only as far as the objects to judge need them.
func (in *inventory) orphans() []Orphan {
	var others []int32
	var need podIndexNeeds
	for i := range in.objects {
		o := &in.objects[i]
		if o.kind != KindPod && !o.meta.Deleting && slices.Contains(in.kinds, o.kind) {
			others = append(others, int32(i))
			need.add(o)
		}
	}
	if len(others) > 0 {
		idx := newPodIndex(in.pods, need)
		for _, i := range others {
			o := &in.objects[i]
			if reason := judge(in.known, in.cluster, o, idx); reason != "" {
				in.found = append(in.found, verdict{namespace: o.meta.Namespace, name: o.meta.Name, obj: i, kind: kindOrder(o.kind), reason: reason})
			}
		}
	}
	if len(in.found) == 0 {
		return nil
	}
	order := sortVerdicts(in.found)
	out := make([]Orphan, len(order))
	inParts(len(order), numParts(len(order)), func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			out[j] = in.orphan(order[j])
		}
	})
	return out
}

// orphan is the Orphan v found.
func (in *inventory) orphan(v *verdict) Orphan {
	var out Orphan
	if p := v.pod; p != nil {
		key, attributed := cachedOwner(p)
		out = Orphan{Kind: KindPod, Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Server: key, Attributed: attributed,
			Reason: v.reason, Created: p.CreationTimestamp.Time}
	} else {
		o := &in.objects[v.obj]
		out = Orphan{Kind: o.kind, Namespace: o.meta.Namespace, Name: o.meta.Name, UID: o.meta.UID,
			ResourceVersion: o.meta.ResourceVersion, Server: o.key, Attributed: o.attributed,
			Reason: v.reason, Created: o.meta.Created}
	}
	out.Cluster = in.cluster
	if v.reason == ReasonOtherCluster {
		out.ServerCluster = in.known.elsewhere(in.cluster, out.Server)
	}
	return out
}

// minPerPart is the fewest items worth a core of their own: below it
// the goroutines cost more than they save.
const minPerPart = 8192

// numParts is how many parts inParts splits n items into: one a core
// (GOMAXPROCS, at most maxParts), each of at least minPerPart items.
func numParts(n int) int {
	return max(1, min(goruntime.GOMAXPROCS(0), n/minPerPart, maxParts))
}

// inParts calls f on parts (numParts(n), computed once by the caller,
// which sizes its per-part results by it) consecutive parts [lo, hi) of
// [0, n), numbered from 0, at once when there is more than one, and
// returns when every call has returned. The passes it splits are
// memory-bound (each item a pointer into a large cache), so they gain
// nearly a core's worth each.
func inParts(n, parts int, f func(part, lo, hi int)) {
	if parts <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() { f(i, i*n/parts, (i+1)*n/parts) })
	}
	wg.Wait()
}

// maxParts bounds the parts: merging k sorted parts costs k comparisons
// an item.
const maxParts = 8

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
func newPodIndex(pods []podRef, need podIndexNeeds) podIndex {
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
	for _, p := range pods {
		if need.uid {
			idx.byUID[p.uid] = struct{}{}
		}
		if need.namespace {
			idx.byNamespace[p.namespace] = struct{}{}
		}
		if need.server && p.attributed {
			idx.byServer[p.key] = struct{}{}
		}
	}
	return idx
}

// judgePod needs only the known servers and the cluster listed.
func judgePod(known *Known, cluster string, key ServerKey, attributed bool) Reason {
	if !attributed {
		return ReasonUnattributed
	}
	running, serverKnown := known.servers[key]
	switch {
	case !serverKnown:
		return ReasonServerUnknown
	case known.elsewhere(cluster, key) != "":
		return ReasonOtherCluster
	case !running:
		return ReasonServerNotRunning
	}
	return ""
}

func judge(known *Known, cluster string, o *object, pods podIndex) Reason {
	if !o.attributed {
		return ReasonUnattributed
	}
	switch o.kind {
	case KindPVC:
		// A claim belongs to the user, not to a running server.
		if _, userKnown := known.users[o.key.User]; !userKnown {
			return ReasonUserUnknown
		}
	case KindSecret, KindService:
		if _, serverKnown := known.servers[o.key]; !serverKnown {
			return ReasonServerUnknown
		}
		if known.elsewhere(cluster, o.key) != "" {
			return ReasonOtherCluster
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
