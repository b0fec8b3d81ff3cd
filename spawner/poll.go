package spawner

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/reflector"
)

// Status is what Poll reports, following KubeSpawner's contract.
type Status struct {
	// Running is true while the pod is pending or running ("not exited").
	Running bool `json:"running"`
	// Ready is true while the pod is ready (its PodReady condition).
	Ready bool `json:"ready"`
	// ExitCode is set when Running is false: the notebook container's exit
	// code, or 1 when there is no pod (or no container status).
	ExitCode int `json:"exit_code"`
	// Reason and Message say why the server is not running (Exited,
	// OOMKilled, Evicted, PodDeleted, PodEnded).
	Reason  Reason `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// URL is the server's current URL while it runs, and URLChanged
	// whether it differs from the one the last Start returned (a pod IP
	// can change when a pod is replaced behind the hub's back).
	URL        string `json:"url,omitempty"`
	URLChanged bool   `json:"url_changed,omitempty"`
	// Deleting is true while the pod is being deleted.
	Deleting bool `json:"deleting,omitempty"`
	// Phase is the pod's phase, "" without a pod.
	Phase corev1.PodPhase `json:"phase,omitempty"`
	// Created is when the pod was created, ReadySince when it last became
	// ready; zero when unknown.
	Created    time.Time `json:"created,omitzero"`
	ReadySince time.Time `json:"ready_since,omitzero"`
}

// Poll reports whether the server still runs. It reads only the shared
// cache, after its first sync (bounded by ctx): never an API call to
// read, and never a wrong "exited" from a cache that has not listed yet.
// A stopped pod is deleted when delete_stopped_pods is on (the default),
// with a UID precondition so that a newer pod of a racing Start is never
// touched. Poll does not wait for an operation in flight.
func (s *Spawner) Poll(ctx context.Context) (Status, error) {
	st, deleteStopped, err := s.pollCached(ctx)
	if err == nil && deleteStopped != nil {
		err = deleteStopped(ctx)
	}
	return st, err
}

// PollCache is Poll without its only API call: it reads the shared cache
// and nothing else, and never deletes a stopped pod (the Status says the
// pod exited; a later Poll deletes it). A controller that reports an exit
// before it cleans up, as the Manager does, calls PollCache and then Poll
// for a server that exited.
func (s *Spawner) PollCache(ctx context.Context) (Status, error) {
	st, _, err := s.pollCached(ctx)
	return st, err
}

// pollCached is PollCache, returning the delete of a stopped pod that
// Poll makes (nil when there is nothing to delete).
func (s *Spawner) pollCached(ctx context.Context) (Status, func(context.Context) error, error) {
	// One lock for the common case: the key, the informer handle, and
	// the URL last built, all from the same state.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Status{}, nil, ErrClosed
	}
	ns, name := s.state.Namespace, s.state.PodName
	key := s.poll.keyFor(ns, name)
	in := urlInputsOf(&s.state, nil)
	url, urlOf, last := s.poll.url, s.poll.urlOf, s.state.URL
	informerNS := ns
	if s.b.watchAll {
		informerNS = metav1.NamespaceAll // as podsHandle takes it
	}
	pods, held := s.pods.current(informerNS)
	s.mu.Unlock()
	if !held {
		var err error
		if pods, err = s.podsHandle(ctx, ns); err != nil {
			return Status{}, nil, err
		}
	}
	pod, ok, err := pods.GetByKey(ctx, key)
	if err != nil {
		return Status{}, nil, fmt.Errorf("spawner: polling pod %s/%s: %w", ns, name, err)
	}
	if !ok {
		x := podExit(nil)
		return Status{ExitCode: x.Code, Reason: x.Reason, Message: x.Message}, nil, nil
	}
	if !ownedBy(s.server, pod) && s.checkCachedPodOwner(pod) != nil {
		// Another server's pod under this name is not this server.
		x := podExit(nil)
		return Status{ExitCode: x.Code, Reason: x.Reason, Message: x.Message}, nil, nil
	}
	st := Status{Phase: pod.Phase, Created: pod.CreationTimestamp.Time}
	if x := podExit(pod); x.Exited {
		st.ExitCode, st.Reason, st.Message = x.Code, x.Reason, x.Message
		if boolOr(s.b.cfg.DeleteStoppedPods, true) && pod.DeletionTimestamp == nil {
			uid := pod.UID
			return st, func(ctx context.Context) error {
				err := s.call(ctx, func(ctx context.Context) error {
					err := s.b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
						GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &uid}})
					if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
						return nil
					}
					return err
				})
				if err != nil {
					return fmt.Errorf("spawner: deleting stopped pod %s/%s: %w", ns, name, err)
				}
				return nil
			}, nil
		}
		return st, nil, nil
	}
	st.Running = true
	st.Deleting = pod.DeletionTimestamp != nil
	st.Ready = isReady(pod)
	if pod.Ready.Status == corev1.ConditionTrue {
		st.ReadySince = pod.Ready.LastTransitionTime.Time
	}
	if pod.PodIP != "" {
		in.uid, in.podIP = pod.UID, pod.PodIP
		if url == "" || urlOf != in {
			s.mu.Lock()
			url, last = s.poll.urlFor(&s.state, pod), s.state.URL
			s.mu.Unlock()
		}
		st.URL = url
		if s.b.hooks.PodURL != nil {
			st.URL = s.b.hooks.PodURL(s, pod, st.URL)
		}
		st.URLChanged = last != "" && last != st.URL
	}
	return st, nil, nil
}

// pollCache holds what Poll derives from the state and the cached pod,
// so that polling a running server allocates nothing: the pod's cache
// key, built when the pod's name changes, and the URL, built when the
// pod (its UID), its IP or the state's URL inputs change.
type pollCache struct {
	ns, name, key string
	url           string
	urlOf         urlInputs
}

// urlInputs is everything State.urlFor reads.
type urlInputs struct {
	uid                  types.UID
	podIP                string
	port                 int32
	ssl, services        bool
	connectHost, dnsName string
}

func (c *pollCache) keyFor(ns, name string) string {
	if c.key == "" || c.ns != ns || c.name != name {
		c.ns, c.name, c.key = ns, name, reflector.PodKey(ns, name)
	}
	return c.key
}

// urlInputsOf returns what st.urlFor(pod) reads; a nil pod leaves its
// part empty.
func urlInputsOf(st *State, pod *reflector.Pod) urlInputs {
	in := urlInputs{port: st.Port, ssl: st.SSL, services: st.Services, connectHost: st.ConnectHost, dnsName: st.DNSName}
	if pod != nil {
		in.uid, in.podIP = pod.UID, pod.PodIP
	}
	return in
}

// urlFor is st.urlFor(pod), built again only when its inputs change.
func (c *pollCache) urlFor(st *State, pod *reflector.Pod) string {
	in := urlInputsOf(st, pod)
	if c.url == "" || c.urlOf != in {
		c.url, c.urlOf = st.urlFor(pod), in
	}
	return c.url
}
