package orphan

import (
	"unsafe"
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
