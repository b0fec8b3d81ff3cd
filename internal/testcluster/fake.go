package testcluster

import (
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// FakeClientset is client-go's fake clientset holding objs, for
// measurements of many objects where a real API server would only add
// minutes of setup. Its watch-list stream holds 100 events, so a streamed
// initial list of more objects would stall: it refuses such watches, and
// informers (spawnkit's Registry among them) fall back to listing.
func FakeClientset(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	client.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		if w, ok := action.(clienttesting.WatchActionImpl); ok && ptr.Deref(w.ListOptions.SendInitialEvents, false) {
			return true, nil, errors.New("the fake clientset cannot stream a watch-list of this size")
		}
		return false, nil, nil
	})
	return client
}
