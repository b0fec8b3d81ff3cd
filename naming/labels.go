package naming

import "maps"

// Label and annotation keys KubeSpawner puts on a user server's objects.
const (
	LabelUsername     = "hub.jupyter.org/username"
	LabelServername   = "hub.jupyter.org/servername"
	LabelComponent    = "component"
	LabelAppComponent = "app.kubernetes.io/component"

	// LabelManagedBy is ManagedBySpawnkit on every object spawnkit
	// creates; orphan finds them by it.
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	ManagedBySpawnkit = "spawnkit"
	// ManagedByKubeSpawner is LabelManagedBy on KubeSpawner's objects,
	// which a hub migrating from it adopts (spawner's AdoptKubeSpawner)
	// or selects (orphan.Options.LabelSelector).
	ManagedByKubeSpawner = "kubespawner"

	AnnotationUsername   = "hub.jupyter.org/username"
	AnnotationServername = "hub.jupyter.org/servername"
	// AnnotationJupyterHubVersion on a pod records the hub's version
	// (spawner.StartOptions.HubVersion), as KubeSpawner does.
	AnnotationJupyterHubVersion = "hub.jupyter.org/jupyterhub-version"

	// DefaultComponent is the component label of user server pods.
	DefaultComponent = "singleuser-server"
)

// Keys spawnkit writes in its own domain. Every such key is here and
// nowhere else; docs/labels.md lists them with KubeSpawner's.
const (
	// Domain is the prefix of every label and annotation key spawnkit
	// writes for itself. A cached pod (reflector.Pod) keeps the
	// annotations under it.
	Domain = "spawnkit.dev/"

	// LabelCluster is the name of the cluster (spawner.Options.Cluster)
	// on every object spawnkit creates there, when one hub runs servers
	// in several clusters; objects of a hub with one cluster have none.
	LabelCluster = Domain + "cluster"

	// AnnotationState holds a server's state record (spawner.State) as
	// JSON on its pod, so that a restarted hub or service finds the
	// server from the cluster alone.
	AnnotationState = Domain + "state"

	// AnnotationStartID is the id of the start that created a pod or
	// claim: a retried create that finds the object with its own id
	// knows the object is its own.
	AnnotationStartID = Domain + "start-id"
)

// LegacyLabelCluster is LabelCluster as releases before the single domain
// wrote it. spawnkit never writes it and never selects by it; the next
// update spawnkit makes to an object that carries it (a user namespace's
// NetworkPolicy or ResourceQuota) moves it to LabelCluster. Pods and claims
// keep it until they are replaced: nothing spawnkit decides depends on the
// cluster label, which is there for operators' selectors.
const LegacyLabelCluster = "spawnkit.io/cluster"

// KubeSpawnerCommonLabels returns KubeSpawner 7.1's default common_labels.
// A hub taking over a KubeSpawner deployment keeps them so that label
// selectors keep matching the objects KubeSpawner created.
func KubeSpawnerCommonLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "jupyterhub",
		"app.kubernetes.io/managed-by": "kubespawner",
		"app":                          "jupyterhub",
		"heritage":                     "jupyterhub",
	}
}

// CommonLabels returns the labels of every object of a server, as
// KubeSpawner's _build_common_labels: the user name label (SafeLabel of the
// raw name), then extra, then common, each overriding the one before.
func CommonLabels(s Server, extra, common map[string]string) map[string]string {
	// Room for PodLabels' three and spawnkit's managed-by and cluster
	// labels.
	labels := make(map[string]string, 1+len(extra)+len(common)+5)
	labels[LabelUsername] = SafeLabel(s.Username)
	maps.Copy(labels, extra)
	maps.Copy(labels, common)
	return labels
}

// PodLabels returns the labels of a server's pod, as KubeSpawner's
// _build_pod_labels: CommonLabels plus the component labels and the
// server name label (SafeLabel of the raw server name, "" for the default
// server), which override everything before them. component "" means
// DefaultComponent.
func PodLabels(s Server, component string, extra, common map[string]string) map[string]string {
	if component == "" {
		component = DefaultComponent
	}
	labels := CommonLabels(s, extra, common)
	labels[LabelAppComponent] = component
	labels[LabelComponent] = component
	labels[LabelServername] = SafeLabel(s.Servername)
	return labels
}

// Annotations returns the annotations of every object of a server: the
// raw user name and, for a named server, the raw server name, then extra.
// Unlike labels they are not slugged, so the server an object belongs to
// can always be recovered from the cluster.
func Annotations(s Server, extra map[string]string) map[string]string {
	a := make(map[string]string, 2+len(extra))
	a[AnnotationUsername] = s.Username
	if s.Servername != "" {
		a[AnnotationServername] = s.Servername
	}
	maps.Copy(a, extra)
	return a
}
