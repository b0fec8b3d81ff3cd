package spawner

import (
	"maps"

	"github.com/spawnkit/spawnkit/naming"
)

// StorageComponent is the component label of claims, as KubeSpawner's.
const StorageComponent = "singleuser-storage"

// withManagedBy returns a copy of l with spawnkit's managed-by label, by
// which orphan finds what spawnkit created, and, when cluster is not "",
// the cluster label (naming.LabelCluster) naming it.
func withManagedBy(l map[string]string, cluster string) map[string]string {
	out := make(map[string]string, len(l)+2)
	maps.Copy(out, l)
	return addManagedBy(out, cluster)
}

// addManagedBy is withManagedBy for a map of the caller's own: it adds
// the labels to l itself, over any configured value. With a cluster, a
// configured legacy cluster label (naming.LegacyLabelCluster) is dropped,
// so that no label on the object names another cluster.
func addManagedBy(l map[string]string, cluster string) map[string]string {
	l[naming.LabelManagedBy] = naming.ManagedBySpawnkit
	if cluster != "" {
		l[naming.LabelCluster] = cluster
		delete(l, naming.LegacyLabelCluster)
	}
	return l
}

// commonAnnotations are KubeSpawner's _build_common_annotations without
// the names (ownerAnnotations adds them): the hub's version when given,
// then the configured extra annotations. The map is new, with room for
// what ownerAnnotations and the pod add.
func commonAnnotations(opts *StartOptions, extra map[string]string) map[string]string {
	a := make(map[string]string, len(extra)+5)
	if opts.HubVersion != "" {
		a[naming.AnnotationJupyterHubVersion] = opts.HubVersion
	}
	maps.Copy(a, extra)
	return a
}

// ownerAnnotations are extra annotations plus the raw user and server
// names, written last so that no configured annotation can forge them:
// they decide which server an object belongs to.
func ownerAnnotations(server naming.Server, extra map[string]string) map[string]string {
	a := make(map[string]string, len(extra)+4)
	maps.Copy(a, extra)
	return addOwner(server, a)
}

// addOwner is ownerAnnotations for a map of the caller's own: it writes
// the names into a itself.
func addOwner(server naming.Server, a map[string]string) map[string]string {
	delete(a, naming.AnnotationServername)
	delete(a, naming.AnnotationStartID)
	delete(a, naming.AnnotationState)
	a[naming.AnnotationUsername] = server.Username
	if server.Servername != "" {
		a[naming.AnnotationServername] = server.Servername
	}
	return a
}
