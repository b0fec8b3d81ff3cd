package spawner

import (
	"encoding/json"
	"maps"
	"net"
	"strconv"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// State is what a hub persists to find a server again after a restart,
// and what every pod records in naming.AnnotationState.
type State struct {
	PodName   string `json:"pod_name"`
	Namespace string `json:"namespace"`
	DNSName   string `json:"dns_name"`
	// PVCName is set once the claim is known to exist.
	PVCName string `json:"pvc_name,omitempty"`
	// Cluster is the cluster the server's objects are in: the
	// Factory's Options.Cluster, "" for a hub with one cluster.
	Cluster string `json:"cluster,omitempty"`

	// What the last Start decided, so that the URL and Poll answers are
	// the same in a process that did not run that Start. A profile can
	// change the port; SSL and services change scheme and host.
	StartID     string            `json:"start_id,omitempty"`
	Port        int32             `json:"port,omitempty"`
	SSL         bool              `json:"ssl,omitempty"`
	Services    bool              `json:"services,omitempty"`
	ConnectHost string            `json:"connect_host,omitempty"` // pod_connect_ip, rendered
	UserID      int64             `json:"user_id,omitempty"`
	UserOptions map[string]string `json:"user_options,omitempty"`
	// Hub is the hub that started the server (StartOptions.Hub): "" for
	// a hub that names none. The spawner-service answers a hub only
	// about servers of its own, or of none.
	Hub string `json:"hub,omitempty"`
	// URL is the URL the last successful Start returned.
	URL     string `json:"url,omitempty"`
	Version string `json:"spawnkit_version"`
}

// String is the state as JSON, the form a hub stores.
func (st State) String() string { b, _ := json.Marshal(st); return string(b) }

// StateFromPod reads the State a pod records (naming.AnnotationState), with the
// pod's own name and namespace. ok is false for a pod without one (made by
// KubeSpawner, or by spawnkit before 0.2). pod is a cached pod, which
// keeps the annotation; for a *corev1.Pod read from the API server pass
// reflector.NewPod(pod).
func StateFromPod(pod *reflector.Pod) (st State, ok bool) {
	raw, ok := pod.Annotations.Lookup(naming.AnnotationState)
	if !ok || json.Unmarshal([]byte(raw), &st) != nil {
		return State{}, false
	}
	st.PodName, st.Namespace = pod.Name, pod.Namespace
	return st, true
}

// urlFor is the server's URL for a pod under this state: https with
// internal SSL; the host is pod_connect_ip when set (as in KubeSpawner,
// where it wins), else the DNS name with SSL or services, else the pod's
// IP (IPv6 in brackets).
func (st *State) urlFor(pod *reflector.Pod) string {
	scheme := "http://"
	if st.SSL {
		scheme = "https://"
	}
	host := pod.PodIP
	switch {
	case st.ConnectHost != "":
		host = st.ConnectHost
	case st.SSL || st.Services:
		host = st.DNSName
	}
	if host == "" {
		return ""
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(int(st.Port)))
}

func (st State) clone() State {
	st.UserOptions = maps.Clone(st.UserOptions)
	return st
}
