// Package spawner starts, polls and stops one user server on Kubernetes
// (Spawner), doing what KubeSpawner 7.1 does for JupyterHub.
//
// # Using it
//
// A hub creates one reflector.Registry for the process and one Spawner per
// user server with New, then calls Start, Poll, Stop and Progress, and
// persists State in its own database (LoadState restores it, and its names
// win over today's templates, so a server survives a template or
// namespace change). Config carries KubeSpawner's options under their
// KubeSpawner names; LoadConfig reads them from YAML or JSON and rejects
// unknown keys and malformed values by name.
//
// # Start
//
// Start renders nothing new (names are rendered and validated by New,
// before any API call), then: creates the user namespace when
// enable_user_namespaces is on (AlreadyExists is fine); ensures the claim
// when storage_pvc_ensure is on (AlreadyExists is fine, and so is
// Forbidden when the claim exists); builds the pod with the manifest
// package and the ModifyPod hook; creates it under internal/retry, each
// request bounded by k8s_api_request_timeout and all tries by
// k8s_api_request_retry_timeout, replacing a stale pod of the same name;
// runs AfterPodCreated; and waits, woken by the registry's subscriptions
// (no sleep loops), until the pod runs with an IP and every container is
// ready. A container waiting for one of fatal_reasons (ErrImagePull,
// ImagePullBackOff, InvalidImageName, CreateContainerConfigError,
// CrashLoopBackOff) ends the wait at once; start_timeout bounds it. A
// failed Start deletes the pod it created (never the claim) and returns a
// *StartError naming the step and the reason. The URL is
// http://<pod IP>:<port>.
//
// # Poll, Stop, Progress
//
// Poll reads only the shared cache, after its first sync: pending or
// running is "not exited"; a terminated notebook container gives its exit
// code (and the pod is deleted when delete_stopped_pods is on); no pod is
// exit status 1. Stop deletes the pod and waits until it is gone; it is
// idempotent and never touches the claim. Progress replays the current
// Start from its beginning to each reader: one event per pod event, each
// a third of the way closer to 90%, then a final event (ready with the
// URL, or failed with the reason).
//
// A Spawner is safe for concurrent use; Start, Stop and DeleteForever of
// one Spawner are serialized. It holds the shared pod informer of its
// namespace from first use until Close.
//
// # Profiles
//
// Config.ProfileList (KubeSpawner's profile_list, or ProfileListFunc for a
// dynamic one) is applied by Config.Resolve to a user's options (profile,
// <option>, <option>--unlisted-choice): the profile's overrides, then
// each option's chosen, unlisted (validated by validation_regex, with
// {value} substituted) or default choice's overrides, merged into the
// loaded options (a mapping merges, null removes a key). A hub calls
// Resolve and hands the result to New; the Manager does it in Spawn.
//
// # Manager
//
// Manager runs a hub's servers: Spawn starts one in the background and
// Events streams its progress to any number of readers, each from the
// beginning, always ending with a ready or failed event. Start(ctx)
// recovers the servers that exist in the cluster (found by spawnkit's
// managed-by label and mapped to servers by the raw names in their
// annotations, so any replica can take over) and reconciles every
// ReconcileInterval: a server whose pod went away becomes stopped, a pod
// still starting is watched until it is ready or fails.
//
// # Not supported
//
// KubeSpawner options that only make sense inside JupyterHub's Python
// process (the options form's HTML templates, Python callables other than
// the id functions, traitlets-specific settings) have no equivalent;
// LoadConfig rejects every unknown option by name instead of ignoring it.
package spawner
