package spawner

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

// ErrOtherCluster is wrapped by the *ProfileError of a start, on a
// Factory with a cluster (Options.Cluster), whose configuration's
// kubernetes_cluster (typically a profile's) names other clusters only:
// start it with the Factory of one of those.
var ErrOtherCluster = errors.New("the server belongs in another cluster")

// checkCluster refuses a start, on the Factory of cluster, whose
// configuration cfg places the server in other clusters: its objects
// would be made where the hub does not look for them. Without a cluster
// the option is the hub's to act on, not the Spawner's.
func checkCluster(cluster string, cfg *kubespawner.Config, server naming.Server) error {
	if cluster == "" || len(cfg.KubernetesCluster) == 0 || slices.Contains(cfg.KubernetesCluster, cluster) {
		return nil
	}
	return &kubespawner.ProfileError{
		Msg: fmt.Sprintf("the configuration places server %q of user %q in kubernetes_cluster %q, which does not name this Factory's cluster %q",
			server.Servername, server.Username, []string(cfg.KubernetesCluster), cluster),
		Err: ErrOtherCluster,
	}
}
