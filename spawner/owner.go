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
	return checkRecordedOwner(want, kind, obj.GetNamespace(), obj.GetName(), user, ok, ann[naming.AnnotationServername], serverMatters)
}

// checkCachedPodOwner is checkOwner for a pod from the cache, which keeps
// the owner annotations.
func (s *Spawner) checkCachedPodOwner(pod *reflector.Pod) error {
	user, ok := pod.Annotations.Lookup(naming.AnnotationUsername)
	return checkRecordedOwner(s.server, "Pod", pod.Namespace, pod.Name, user, ok, pod.Annotations.Get(naming.AnnotationServername), true)
}

// checkRecordedOwner is checkOwner's rule, on the owner an object's
// annotations record (annotated false when they name no user).
func checkRecordedOwner(want naming.Server, kind, namespace, name, user string, annotated bool, servername string, serverMatters bool) error {
	if !annotated {
		return &CollisionError{Kind: kind, Namespace: namespace, Name: name, Want: want}
	}
	have := naming.Server{Username: user, Servername: servername}
	if have.Username != want.Username || (serverMatters && have.Servername != want.Servername) {
		return &CollisionError{Kind: kind, Namespace: namespace, Name: name, Want: want, Have: &have}
	}
	return nil
}
