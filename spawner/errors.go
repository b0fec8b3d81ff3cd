package spawner

import (
	"errors"
	"fmt"

	"github.com/spawnkit/spawnkit/naming"
)

// Step names the step of Start that failed.
type Step string

// The steps of Start, in order.
const (
	StepPlan      Step = "plan"      // profiles resolved, objects rendered: no API call yet
	StepWatch     Step = "watch"     // taking the shared pod and event informers
	StepNamespace Step = "namespace" // the user namespace (enable_user_namespaces)
	StepPolicy    Step = "policy"    // the user namespace's NetworkPolicy (network_policy)
	StepQuota     Step = "quota"     // the user namespace's ResourceQuota and its room for the server
	StepPVC       Step = "pvc"       // the claim (storage_pvc_ensure)
	StepHook      Step = "hook"      // ModifyPod or AfterPodCreated
	StepPod       Step = "pod"       // creating the pod
	StepSecret    Step = "secret"    // the environment Secret or the internal-SSL secret
	StepService   Step = "service"   // the service (services_enabled or internal SSL)
	StepWait      Step = "wait"      // waiting for the pod to be ready
)

var (
	// ErrStartTimeout is wrapped by the error of a Start that ran out of
	// start_timeout.
	ErrStartTimeout = errors.New("the server did not become ready within start_timeout")
	// ErrStartCancelled is wrapped by the error of a Start that Stop
	// cancelled.
	ErrStartCancelled = errors.New("the start was cancelled by Stop")
	// ErrStopTimeout: the deleted pod was still there after stop_timeout
	// (Config.StopTimeout); Stop returns it wrapped, naming the pod.
	ErrStopTimeout = errors.New("the pod did not go within stop_timeout")
	// ErrClosed is returned by every call on a closed Spawner, and wrapped
	// by the error of a Start that Close cancelled.
	ErrClosed = errors.New("spawner: the Spawner is closed")
	// ErrDetach, used as the cause of a cancelled Start ctx
	// (context.WithCancelCause), makes Start return at once and leave the
	// objects it created in place, so that a later Resume (typically in
	// another process) picks the server up. Any other cancellation deletes
	// the pod.
	ErrDetach = errors.New("spawner: detached; the server is left as it is")
	// ErrPodGone is wrapped by the error of a Start whose pod was deleted
	// or replaced by someone else.
	ErrPodGone = errors.New("the pod was deleted or replaced by someone else")
	// ErrNoPod is returned by Resume when the server has no pod.
	ErrNoPod = errors.New("spawner: the server has no pod")
)

// StartError reports which step of Start failed and why. It wraps the
// cause, so errors.Is(err, ErrStartTimeout) and errors.As(err,
// &*CollisionError) work on it.
type StartError struct {
	Server naming.Server
	Step   Step
	// Reason is a container's waiting reason when a fatal one ended the
	// wait (ErrImagePull, ...), the pod's status reason, or one of the
	// Reason constants.
	Reason Reason
	Err    error
}

func (e *StartError) Error() string {
	reason := ""
	if e.Reason != "" {
		reason = " (" + string(e.Reason) + ")"
	}
	return fmt.Sprintf("spawner: starting server %q of user %q failed at %s%s: %v", e.Server.Servername, e.Server.Username, e.Step, reason, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// CollisionError says an object a server needs has the server's name but
// belongs to another server, or to no known server. Safe-scheme names can
// collide (the scheme keeps 32 bits of a hash), so spawnkit never deletes,
// replaces or reuses an object whose owner annotations name another
// server; it returns this error and changes nothing.
type CollisionError struct {
	Kind      string // "Pod", "PersistentVolumeClaim", "Secret", "Service"
	Namespace string
	Name      string
	// Want is the server that needs the object; Have the one its
	// annotations name, or nil when it has none (made by hand, or by
	// something other than spawnkit or KubeSpawner).
	Want naming.Server
	Have *naming.Server
}

func (e *CollisionError) Error() string {
	have := "no server (it has no hub.jupyter.org/username annotation)"
	if e.Have != nil {
		have = fmt.Sprintf("server %q of user %q", e.Have.Servername, e.Have.Username)
	}
	return fmt.Sprintf("spawner: %s %s/%s is needed by server %q of user %q but belongs to %s; nothing was changed. "+
		"Two names that map to the same object name: change the name template, or remove the object if it is stale",
		e.Kind, e.Namespace, e.Name, e.Want.Servername, e.Want.Username, have)
}

// IsCollision reports whether err is or wraps a *CollisionError.
func IsCollision(err error) bool {
	var c *CollisionError
	return errors.As(err, &c)
}
