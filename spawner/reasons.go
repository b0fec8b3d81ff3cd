package spawner

// Reason says in one word why a start failed or a server is not
// running: a *StartError's Reason, and Status.Reason. Besides the
// constants below it can be a container's waiting or terminated reason
// as the kubelet reports it (ImagePullBackOff, CrashLoopBackOff, Error,
// ...) or a pod's status reason.
type Reason string

// Reasons a StartError carries besides a container's waiting reason.
const (
	ReasonTimeout   Reason = "Timeout"   // start_timeout ran out
	ReasonCancelled Reason = "Cancelled" // Stop or Close cancelled the start, or its ctx ended
	ReasonDetached  Reason = "Detached"  // the ctx was cancelled with ErrDetach: the pod is left running
	ReasonPodGone   Reason = "PodGone"   // the pod was deleted or replaced by someone else
	ReasonCollision Reason = "Collision" // an object of the same name belongs to another server
	ReasonInvalid   Reason = "Invalid"   // the configuration cannot start this server
	// ReasonQuotaExceeded: the user namespace's ResourceQuota has no
	// room for the server (user_namespace_resource_quota).
	ReasonQuotaExceeded Reason = "QuotaExceeded"
	// ReasonErrImagePull: the image could not be pulled, twice (a
	// container waiting with ErrImagePull or ImagePullBackOff).
	ReasonErrImagePull Reason = "ErrImagePull"
	// ReasonPendingTimeout: the pod was not scheduled within
	// pending_timeout; ReasonCreatingTimeout: scheduled, its containers
	// were not running within creating_timeout.
	ReasonPendingTimeout  Reason = "PendingTimeout"
	ReasonCreatingTimeout Reason = "CreatingTimeout"
	// ReasonUnschedulable: the scheduler refused the pod for
	// unschedulable_timeout, and no autoscaler said it adds a node.
	ReasonUnschedulable Reason = "Unschedulable"
	// ReasonAPIError: a request to the API server failed (refused, or
	// not answered within the retry budget); the message says which.
	ReasonAPIError Reason = "APIError"
	// ReasonStartFailed: any other failure (a hook's error, say); a
	// failed start always carries a reason.
	ReasonStartFailed Reason = "StartFailed"
)

// Exit reasons Poll reports besides a container's own terminated reason.
const (
	ReasonExited     Reason = "Exited"     // the notebook container terminated with a code
	ReasonOOMKilled  Reason = "OOMKilled"  // the kernel killed it for memory
	ReasonEvicted    Reason = "Evicted"    // the kubelet evicted the pod
	ReasonPodDeleted Reason = "PodDeleted" // there is no pod
	ReasonPodEnded   Reason = "PodEnded"   // the pod failed or succeeded without a notebook status
)
