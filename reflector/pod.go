package reflector

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync/atomic"
	"unique"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/naming"
)

// Pod is a pod as the pod informers cache it: what spawnkit reads of a
// pod and nothing more (the cache contract in the package
// documentation), in a fraction of the memory of a *corev1.Pod. Strings
// that many pods share (namespace, label and annotation keys, short
// label values, reasons, container names) are interned.
//
// A Pod returned by Pods is the cache's own, shared by every reader: it
// is read-only, and so are its slices and the objects they point to.
// The cache never changes a Pod it has handed out (an update caches a new
// one), so reading it is safe for concurrent use. Code that needs a field
// the cache does not keep reads the pod from the API server.
type Pod struct {
	Namespace         string
	Name              string
	UID               types.UID
	ResourceVersion   string
	CreationTimestamp metav1.Time
	// DeletionTimestamp is set once the pod is being deleted.
	DeletionTimestamp *metav1.Time
	// Labels are all the pod's labels. Annotations are only those under
	// the prefixes hub.jupyter.org/ (KubeSpawner's and spawnkit's owner
	// annotations: username, servername) and spawnkit.dev/ (spawnkit's
	// own: state, start-id); the others are dropped.
	Labels      Pairs
	Annotations Pairs
	// NodeName is spec.nodeName.
	NodeName string
	// Ports are the ports of the pod's containers (not of its init
	// containers), in spec order.
	Ports []ContainerPort

	// Phase, Reason, Message, PodIP and HostIP are those of the pod's
	// status.
	Phase   corev1.PodPhase
	Reason  string
	Message string
	PodIP   string
	HostIP  string
	// Ready and Scheduled are the pod's PodReady and PodScheduled
	// conditions; their Status is "" when the pod has no such condition.
	// The other conditions are not kept.
	Ready     PodCondition
	Scheduled PodCondition
	// InitContainerStatuses and ContainerStatuses are the statuses of
	// the pod's init and regular containers, in the kubelet's order.
	InitContainerStatuses []ContainerStatus
	ContainerStatuses     []ContainerStatus
}

// keptAnnotationPrefixes are the prefixes of the annotation keys a cached
// Pod keeps.
var keptAnnotationPrefixes = [...]string{"hub.jupyter.org/", naming.Domain}

// PodCondition is a pod condition as a cached Pod keeps it (its type is
// the field that holds it).
type PodCondition struct {
	Status             corev1.ConditionStatus
	Reason             string
	Message            string
	LastTransitionTime metav1.Time
}

// ContainerStatus is a container's status as a cached Pod keeps it.
// State has at most one of Waiting (reason, message), Running (startedAt)
// and Terminated (exitCode, signal, reason, message, startedAt,
// finishedAt; no containerID) set. Images, ids, resources and the last
// termination state are not kept.
type ContainerStatus struct {
	Name         string
	State        corev1.ContainerState
	Ready        bool
	RestartCount int32
}

// ContainerPort is a port of one of the pod's containers.
type ContainerPort struct {
	// Container is the name of the container that declares the port.
	Container string
	// Name is the port's name ("" when unnamed).
	Name          string
	ContainerPort int32
}

// Pair is one label or annotation.
type Pair struct{ Key, Value string }

// Pairs holds a pod's labels or annotations, sorted by key: a slice
// costs a fraction of a map for the handful a pod has. It implements
// labels.Labels, so a label selector matches it directly.
type Pairs []Pair

var _ labels.Labels = Pairs(nil)

// Lookup returns the value of key, and whether there is one.
func (p Pairs) Lookup(key string) (string, bool) {
	for _, kv := range p {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// Get returns the value of key, "" when there is none.
func (p Pairs) Get(key string) string { v, _ := p.Lookup(key); return v }

// Has reports whether there is a value for key.
func (p Pairs) Has(key string) bool { _, ok := p.Lookup(key); return ok }

// Map returns the pairs as a new map, nil when there are none.
func (p Pairs) Map() map[string]string {
	if len(p) == 0 {
		return nil
	}
	m := make(map[string]string, len(p))
	for _, kv := range p {
		m[kv.Key] = kv.Value
	}
	return m
}

// NewPod returns the cached form of pod, as TransformPod makes it: what
// the cache contract keeps, with shared strings interned and the pod's
// own strings (name, uid, resourceVersion, messages, IPs, the owner's
// names, the recorded State) copied into one allocation. pod is not
// changed and the result shares none of its memory.
func NewPod(pod *corev1.Pod) *Pod { return newPod(pod, nil) }

// newPod is NewPod for an update of prev, a version of the pod the cache
// holds (nil for none; not always the latest: the informer may still be
// storing a newer one, which does not matter, as only values equal to
// the update's are shared). While the pod keeps its uid, labels and
// kept annotations (a pod's status changes five or so times as it
// starts; its labels and annotations seldom), the new version shares
// prev's name, uid, labels and annotations instead of building and
// sorting them again. Sharing is all or nothing, so that a version's
// strings come from at most its own copy and one earlier version's.
func newPod(pod *corev1.Pod, prev *Pod) *Pod {
	shared := prev != nil && prev.UID == pod.UID && prev.Name == pod.Name &&
		prev.Labels.equalMap(pod.Labels, nil) && prev.Annotations.equalMap(pod.Annotations, keptAnnotation)
	out := &Pod{
		Namespace:         intern(pod.Namespace),
		Name:              pod.Name,
		UID:               pod.UID,
		ResourceVersion:   pod.ResourceVersion,
		CreationTimestamp: pod.CreationTimestamp,
		NodeName:          intern(pod.Spec.NodeName),
		Ports:             portsOf(pod.Spec.Containers),
		Phase:             corev1.PodPhase(intern(string(pod.Status.Phase))),
		Reason:            intern(pod.Status.Reason),
		Message:           pod.Status.Message,
		PodIP:             pod.Status.PodIP,
		HostIP:            intern(pod.Status.HostIP),

		InitContainerStatuses: statusesOf(pod.Status.InitContainerStatuses),
		ContainerStatuses:     statusesOf(pod.Status.ContainerStatuses),
	}
	if t := pod.DeletionTimestamp; t != nil {
		out.DeletionTimestamp = &metav1.Time{Time: t.Time}
	}
	if shared {
		out.Name, out.UID, out.Labels, out.Annotations = prev.Name, prev.UID, prev.Labels, prev.Annotations
	} else {
		out.Labels = pairsOf(pod.Labels, nil, true)
		// Annotation values are mostly the pod's own (a start id, a
		// state), not worth interning; one that repeats a label (the
		// owner's names usually do) shares the label's string.
		out.Annotations = pairsOf(pod.Annotations, keptAnnotation, false)
		for i, a := range out.Annotations {
			for _, l := range out.Labels {
				if l.Value == a.Value {
					out.Annotations[i].Value = l.Value
					break
				}
			}
		}
	}
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case corev1.PodReady:
			out.Ready = conditionOf(c)
		case corev1.PodScheduled:
			out.Scheduled = conditionOf(c)
		}
	}
	out.ownStrings(!shared)
	return out
}

// ownStrings copies the strings of p that are its own (not interned) into
// one allocation. The decoder allocated each of them apart, among the
// garbage of the whole decoded pod; together they cost less heap (one
// size-class rounding instead of one per string) and are read together:
// a pass over 100,000 cached pods (orphan.List, recovery) misses the CPU's
// caches less. A string that two fields share (an annotation repeating a
// label) stays shared.
//
// Without meta, the name, uid, labels and annotations are an earlier
// version's (newPod), already owned, and left alone.
func (p *Pod) ownStrings(meta bool) {
	var buf [32]*string // on the stack for all but an odd pod
	fields := buf[:0]
	if meta {
		fields = append(fields, &p.Name, (*string)(&p.UID))
	}
	fields = append(fields, &p.ResourceVersion, &p.Message, &p.PodIP, &p.Ready.Message, &p.Scheduled.Message)
	if meta {
		fields = p.pairStrings(fields)
	}
	for _, cs := range [][]ContainerStatus{p.InitContainerStatuses, p.ContainerStatuses} {
		for i := range cs {
			if w := cs[i].State.Waiting; w != nil {
				fields = append(fields, &w.Message)
			}
			if t := cs[i].State.Terminated; t != nil {
				fields = append(fields, &t.Message)
			}
		}
	}
	packStrings(fields)
}

// packStrings copies the strings fields point to into one allocation and
// points each field at its copy. A string that two fields share stays
// one.
func packStrings(fields []*string) {
	n := 0
	for _, f := range fields {
		n += len(*f)
	}
	if n == 0 {
		return
	}
	slab := make([]byte, 0, n)
	type moved struct{ from, to string }
	var movedBuf [32]moved
	done := movedBuf[:0]
next:
	for _, f := range fields {
		s := *f
		if s == "" {
			continue
		}
		for _, m := range done {
			if unsafe.StringData(m.from) == unsafe.StringData(s) && len(m.from) == len(s) {
				*f = m.to // the same string in two fields stays one
				continue next
			}
		}
		// slab never grows past its capacity, so the strings already in
		// it stay where they are, and no byte of it is written again.
		start := len(slab)
		slab = append(slab, s...)
		*f = unsafe.String(&slab[start], len(s))
		done = append(done, moved{s, *f})
	}
}

// pairStrings appends to fields the pod's own strings among its label
// and annotation values.
func (p *Pod) pairStrings(fields []*string) []*string {
	for i, l := range p.Labels {
		if !internedLabelValue(l.Key, l.Value) {
			fields = append(fields, &p.Labels[i].Value)
		}
	}
annotations:
	for i, a := range p.Annotations {
		for _, l := range p.Labels {
			if internedLabelValue(l.Key, l.Value) && unsafe.StringData(l.Value) == unsafe.StringData(a.Value) {
				continue annotations // shares an interned label value
			}
		}
		fields = append(fields, &p.Annotations[i].Value)
	}
	return fields
}

// equalMap reports whether p holds exactly the pairs of m whose key keep
// accepts (all with a nil keep).
func (p Pairs) equalMap(m map[string]string, keep func(string) bool) bool {
	n := 0
	for k := range m {
		if keep == nil || keep(k) {
			n++
		}
	}
	if n != len(p) {
		return false
	}
	for _, kv := range p {
		if v, ok := m[kv.Key]; !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// internedLabelValue reports whether pairsOf interns the value of label
// key: one that other pods may share (short, and not the pod's own user
// or server name).
func internedLabelValue(key, value string) bool {
	return len(value) <= 63 && !ownValue(key) // 63: a label value's limit
}

func keptAnnotation(key string) bool {
	for _, p := range keptAnnotationPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func conditionOf(c corev1.PodCondition) PodCondition {
	return PodCondition{
		Status:             corev1.ConditionStatus(intern(string(c.Status))),
		Reason:             intern(c.Reason),
		Message:            c.Message,
		LastTransitionTime: c.LastTransitionTime,
	}
}

// pairsOf returns the pairs of m whose key keep accepts (all with a nil
// keep), sorted by key, with keys interned and, with internValues, the
// values that may be shared (short ones) too.
func pairsOf(m map[string]string, keep func(string) bool, internValues bool) Pairs {
	n := 0
	for k := range m {
		if keep == nil || keep(k) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make(Pairs, 0, n)
	for k, v := range m {
		if keep == nil || keep(k) {
			// A label value is interned unless it names the pod's own
			// user or server: interning a string no other pod shares
			// costs an entry in the intern map and saves nothing.
			if internValues && internedLabelValue(k, v) {
				v = intern(v)
			}
			out = append(out, Pair{intern(k), v})
		}
	}
	slices.SortFunc(out, func(a, b Pair) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// ownValue reports whether the label key's value is the pod's own: the
// user or server it belongs to (KubeSpawner's labels, escaped or not).
func ownValue(key string) bool {
	return key == naming.LabelUsername || key == naming.LabelServername
}

func portsOf(cs []corev1.Container) []ContainerPort {
	n := 0
	for _, c := range cs {
		n += len(c.Ports)
	}
	if n == 0 {
		return nil
	}
	out := make([]ContainerPort, 0, n)
	for _, c := range cs {
		for _, p := range c.Ports {
			out = append(out, ContainerPort{Container: intern(c.Name), Name: intern(p.Name), ContainerPort: p.ContainerPort})
		}
	}
	return out
}

func statusesOf(cs []corev1.ContainerStatus) []ContainerStatus {
	if len(cs) == 0 {
		return nil
	}
	out := make([]ContainerStatus, len(cs))
	for i, c := range cs {
		var st corev1.ContainerState
		if w := c.State.Waiting; w != nil {
			st.Waiting = &corev1.ContainerStateWaiting{Reason: intern(w.Reason), Message: w.Message}
		}
		if r := c.State.Running; r != nil {
			st.Running = &corev1.ContainerStateRunning{StartedAt: r.StartedAt}
		}
		if t := c.State.Terminated; t != nil {
			st.Terminated = &corev1.ContainerStateTerminated{ExitCode: t.ExitCode, Signal: t.Signal, Reason: intern(t.Reason),
				Message: t.Message, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt}
		}
		out[i] = ContainerStatus{Name: intern(c.Name), State: st, Ready: c.Ready, RestartCount: c.RestartCount}
	}
	return out
}

// intern returns the canonical copy of s, so that the many pods that
// carry the same string share one.
//
// unique.Make is the table (its entries go when nothing holds them any
// more), but a lookup there is a hash-trie walk and a weak-pointer load,
// a third of a transform's time, and the same few dozen strings (keys,
// the namespace, phases, reasons) are interned on every pod update. So a
// small direct-mapped cache of handles answers first: a hit is a hash
// and a comparison. A slot holds a unique.Handle, which keeps its entry
// (and so its canonical copy) alive: what the cache returns is always
// what unique.Make would. Slots are atomic, since informers transform on
// their own goroutines; the cache pins at most internSlots strings.
func intern(s string) string {
	if s == "" {
		return ""
	}
	slot := &internCache[maphash.String(internSeed, s)%internSlots]
	if h := slot.Load(); h != nil {
		if v := h.Value(); v == s {
			return v
		}
	}
	h := unique.Make(s)
	slot.Store(&h)
	return h.Value()
}

const internSlots = 1024

var (
	internSeed  = maphash.MakeSeed()
	internCache [internSlots]atomic.Pointer[unique.Handle[string]]
)
