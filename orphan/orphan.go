package orphan

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
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
