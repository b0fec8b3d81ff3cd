package spawner

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// checkOwner compares the owner annotations of an existing object with
// this server. An object without them, or naming another server, is a
// *CollisionError. With serverMatters false only the user must match (a
// claim whose name template does not name the server is shared by a
// user's servers).
func (s *Spawner) checkOwner(kind string, obj metav1.Object, serverMatters bool) error {
	return checkOwner(s.server, kind, obj, serverMatters)
}

func checkOwner(want naming.Server, kind string, obj metav1.Object, serverMatters bool) error {
	ann := obj.GetAnnotations()
	user, ok := ann[naming.AnnotationUsername]
	return checkRecordedOwner(want, ownerRecord{
		kind: kind, namespace: obj.GetNamespace(), name: obj.GetName(),
		user: user, annotated: ok, servername: ann[naming.AnnotationServername],
	}, serverMatters)
}

// checkCachedPodOwner is checkOwner for a pod from the cache, which keeps
// the owner annotations.
func (s *Spawner) checkCachedPodOwner(pod *reflector.Pod) error {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	return checkRecordedOwner(s.server, ownerRecord{
		kind: "Pod", namespace: pod.Namespace, name: pod.Name,
		user: user, annotated: ok, servername: pod.Annotations.Get(naming.AnnotationServername),
	}, true)
}

// ownerRecord is an object and the owner its annotations record.
type ownerRecord struct {
	kind, namespace, name string
	user, servername      string
	annotated             bool // the annotations name a user
}

// checkRecordedOwner is checkOwner's rule, on the owner an object's
// annotations record.
func checkRecordedOwner(want naming.Server, rec ownerRecord, serverMatters bool) error {
	if !rec.annotated {
		return &CollisionError{Kind: rec.kind, Namespace: rec.namespace, Name: rec.name, Want: want}
	}
	have := naming.Server{Username: rec.user, Servername: rec.servername}
	if have.Username != want.Username || (serverMatters && have.Servername != want.Servername) {
		return &CollisionError{Kind: rec.kind, Namespace: rec.namespace, Name: rec.name, Want: want, Have: &have}
	}
	return nil
}

// ownedBy reports whether pod is want's by checkOwner's rule (server
// name included), without building checkOwner's error, which costs Poll
// an allocation. A false answer is only a hint: Poll asks
// checkCachedPodOwner.
func ownedBy(want naming.Server, pod *reflector.Pod) bool {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	return ok && user == want.Username && pod.Annotations.Get(naming.AnnotationServername) == want.Servername
}
