package orphan

import "strings"

// place records that key lives in cluster ("" forgets where).
func (k *Known) place(key ServerKey, cluster string) {
	if cluster == "" {
		delete(k.clusters, key) // a no-op on the nil map
		return
	}
	if k.clusters == nil {
		k.clusters = map[ServerKey]string{}
		k.clusterNames = map[string]string{}
	}
	name, ok := k.clusterNames[cluster]
	if !ok {
		// The caller's string may be part of a larger one (a database
		// row); a handful of cluster names are kept, not 100,000 rows.
		name = strings.Clone(cluster)
		k.clusterNames[name] = name
	}
	k.clusters[key] = name
}

// elsewhere is the cluster the hub records key in, when that is not
// cluster, the one being listed; "" when key lives there, its placement
// is unknown, or cluster is "" (one unnamed cluster: placements are not
// consulted). A Known without placements costs one length check.
func (k *Known) elsewhere(cluster string, key ServerKey) string {
	if cluster == "" || len(k.clusters) == 0 {
		return ""
	}
	if c := k.clusters[key]; c != cluster {
		return c
	}
	return ""
}
