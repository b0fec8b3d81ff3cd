package testcluster

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// addUserMu serialises envtest's AddUser, for every Cluster: its
// certificate authority numbers the certificates it signs without a lock.
var addUserMu sync.Mutex

// UserConfig returns a client config for a user with the given groups,
// authenticated by a client certificate envtest makes
// (envtest.Environment.AddUser). A user without system:masters has only
// what RBAC grants it. The config has the admin Config's QPS and Burst.
// Safe for concurrent use; not after Stop.
func (c *Cluster) UserConfig(name string, groups ...string) (*rest.Config, error) {
	if name == "" {
		return nil, errors.New("testcluster: UserConfig needs a user name")
	}
	if c.env == nil {
		return nil, errors.New("testcluster: UserConfig on a stopped cluster")
	}
	addUserMu.Lock()
	defer addUserMu.Unlock()
	user, err := c.env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: c.Config.QPS, Burst: c.Config.Burst})
	if err != nil {
		return nil, fmt.Errorf("testcluster: adding user %q: %w", name, err)
	}
	return user.Config(), nil
}
