package testcluster

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// finisher plays the kubelet's last part in a graceful pod delete: once a
// pod on a node has a deletion timestamp and no finalizers, it deletes the
// pod for good, with a UID precondition, as the kubelet's status manager
// does. kwok's own pod-delete stage deletes by name alone, so a delete it
// queued for an old pod could remove a new pod of the same name created
// in the meantime: a real cluster never does that, and tests that replace
// a server's pod would then fail for the simulator's sake.
type finisher struct {
	client   kubernetes.Interface
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[podRef]
	log      *log.Logger
}

// podRef names one pod incarnation: a re-created pod of the same name has
// another UID and is never finished by a delete meant for the old one.
type podRef struct {
	Namespace, Name string
	UID             types.UID
}

// startFinisher starts the finisher and waits until it has seen every
// existing pod. It runs until Stop.
func (c *Cluster) startFinisher(ctx context.Context) error {
	f, err := os.Create(filepath.Join(c.LogDir, "finisher.log"))
	if err != nil {
		return fmt.Errorf("creating log for the pod finisher: %w", err)
	}
	c.finisherLog = f
	fin, err := newFinisher(c.Client, log.New(f, "", log.LstdFlags|log.Lmicroseconds))
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.stopFinisher, c.finisherDone = cancel, make(chan struct{})
	go func() {
		defer close(c.finisherDone)
		fin.run(runCtx)
	}()
	return c.waitFor(ctx, 60*time.Second, "the pod finisher's informer to sync", func(context.Context) (bool, error) {
		return fin.informer.HasSynced(), nil
	})
}

func newFinisher(client kubernetes.Interface, logger *log.Logger) (*finisher, error) {
	informer, err := allPodsInformer(client)
	if err != nil {
		return nil, fmt.Errorf("the pod finisher's informer: %w", err)
	}
	return &finisher{
		client:   client,
		informer: informer,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[podRef](),
			workqueue.TypedRateLimitingQueueConfig[podRef]{Name: "testcluster-finisher"}),
		log: logger,
	}, nil
}

// run finishes deletes until ctx ends and returns once its workers have.
func (f *finisher) run(ctx context.Context) {
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if ok && pod.DeletionTimestamp != nil && len(pod.Finalizers) == 0 && pod.Spec.NodeName != "" {
			f.queue.Add(podRef{pod.Namespace, pod.Name, pod.UID})
		}
	}
	if _, err := f.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		f.log.Printf("adding the event handler: %v", err)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.informer.RunWithContext(ctx)
	}()
	workers := make(chan struct{})
	const n = 4
	for range n {
		go func() {
			defer func() { workers <- struct{}{} }()
			for f.process(ctx) {
			}
		}()
	}
	<-ctx.Done()
	f.queue.ShutDown()
	for range n {
		<-workers
	}
	<-done
}

func (f *finisher) process(ctx context.Context) bool {
	ref, quit := f.queue.Get()
	if quit {
		return false
	}
	defer f.queue.Done(ref)
	err := f.client.CoreV1().Pods(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      &metav1.Preconditions{UID: &ref.UID},
	})
	switch {
	case err == nil:
		f.log.Printf("deleted pod %s/%s (uid %s)", ref.Namespace, ref.Name, ref.UID)
		f.queue.Forget(ref)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone already, or the name now belongs to another pod.
		f.queue.Forget(ref)
	case ctx.Err() != nil:
	default:
		f.log.Printf("deleting pod %s/%s (uid %s): %v; retrying", ref.Namespace, ref.Name, ref.UID, err)
		f.queue.AddRateLimited(ref)
	}
	return true
}
