package testcluster

// Pods on a Lifecycle cluster become Running and Ready within about a
// second. A test makes a pod misbehave instead by setting BehaviorAnnotation
// on it; kwok's stages (stages.yaml) then play the matching kubelet story,
// status and events included.
const (
	// BehaviorAnnotation selects how the simulated kubelet treats a pod.
	BehaviorAnnotation = "testcluster.spawnkit.dev/behavior"

	// BehaviorImagePullError: the containers wait with reason ErrImagePull
	// (a Warning event "Failed"), then ImagePullBackOff (an event
	// "BackOff"), and again after each back-off, as a kubelet retrying a
	// missing image does; the pod stays Pending.
	BehaviorImagePullError = "image-pull-error"

	// BehaviorExit: the pod becomes Running and Ready, then its containers
	// terminate with ExitCodeAnnotation's code (default 1) after
	// ExitAfterAnnotation (a Go duration, default 0s). The pod's phase
	// becomes Failed, or Succeeded for code 0.
	BehaviorExit = "exit"

	// BehaviorNeverReady: the pod becomes Running but its containers never
	// become ready.
	BehaviorNeverReady = "never-ready"

	// ExitCodeAnnotation is the exit code for BehaviorExit, a decimal string.
	ExitCodeAnnotation = "testcluster.spawnkit.dev/exit-code"

	// ExitAfterAnnotation is how long a BehaviorExit pod runs, as a Go
	// duration string ("2s").
	ExitAfterAnnotation = "testcluster.spawnkit.dev/exit-after"

	// ReadyAfterAnnotation is how long a pod stays Pending with its IP
	// before its containers start (and, but for BehaviorNeverReady, become
	// ready), or with BehaviorImagePullError before its first pull fails,
	// as a Go duration string ("2s"); default 0s. A real kubelet
	// takes seconds here (the image pull), and the scheduler's and the
	// kubelet's events reach watchers meanwhile; a test that shows them
	// in a start's progress sets it so that their order does not depend
	// on how loaded the machine is.
	ReadyAfterAnnotation = "testcluster.spawnkit.dev/ready-after"
)
