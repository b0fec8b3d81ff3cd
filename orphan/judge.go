package orphan

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/reflector"
)

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
