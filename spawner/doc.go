// Package spawner starts, polls and stops user servers on Kubernetes:
// Spawner runs one server, doing what KubeSpawner 7.1 does for
// JupyterHub. (The manager package runs a hub's servers as a controller,
// on this package's exported API.)
//
// # Using a Spawner
//
// A hub creates one reflector.Registry for the process, one Factory for
// its configuration (NewFactory checks it once) and one Spawner per user
// server with Factory.New (New does both for a single server), then
// calls Start, Poll and Stop, and persists
// State in its own database (LoadState restores it; its names win over
// today's templates, so a server survives a template or namespace
// change). Config carries KubeSpawner's options under their KubeSpawner
// names; LoadConfig reads them from YAML or JSON and rejects unknown keys
// and malformed values by name. Everything a start needs that changes per
// start (JupyterHub's API token and environment, cmd and args, internal
// SSL material, user options) is in StartOptions, so one Spawner serves
// many starts.
//
// # Start
//
// Start first resolves the user options (profiles) and renders every
// object (Plan), so a configuration that cannot work fails before any
// API call. Then, in order: the user namespace (enable_user_namespaces)
// with its NetworkPolicy (network_policy) and ResourceQuota
// (user_namespace_resource_quota), created or updated to the
// configuration, and the quota's room for the pod checked (a start it has
// no room for, or whose containers lack a limit it counts, fails at step
// quota with reason QuotaExceeded before anything of the server exists),
// the claim (storage_pvc_ensure), the pod (after the ModifyPod hook), the
// environment Secret, the internal-SSL secret and the service (owned by
// the pod), the AfterPodCreated hook, and the wait until the pod's PodReady condition is
// true (readiness gates included), bounded by start_timeout. The URL is
// http://<pod IP>:<port>; https://<dns name> with internal SSL; the DNS
// name with services; pod_connect_ip when set (it wins, as in
// KubeSpawner); the PodURL hook has the last word, given the pod as the
// shared cache keeps it (reflector.Pod).
//
// The hub's API token never enters the pod spec: the variables
// secret_env names (default DefaultSecretEnv: JUPYTERHUB_API_TOKEN and
// JPY_API_TOKEN) are set by secretKeyRef from the environment Secret
// (EnvSecretName: the pod's name and ".env"), which holds their values,
// is owned by the pod (the garbage collector deletes it with the pod)
// and is replaced by every start. It is created right after the pod,
// since an owner reference needs the pod's uid and z2jh's Role has no
// update or patch; a kubelet that looks for it first reports
// CreateContainerConfigError naming it and retries, and the start waits
// on rather than taking that for fatal. secret_env: [] gives KubeSpawner's
// plain values.
//
// A start's progress carries its pod's Kubernetes events as
// "<time> [<type>] <message>", the messages shaped by event_message_rules
// (rewritten or dropped, the first matching rule deciding) and then by
// Hooks.EventMessage; ModifyPod and AfterPodCreated add messages of their
// own with ReportProgress.
//
// Each API request is bounded by k8s_api_request_timeout, counted from
// when it leaves the client (time queued in client-go's rate limiter is
// bounded by the retry budget instead), and retried with exponential
// backoff and jitter within k8s_api_request_retry_timeout when its error
// is on an allow-list: 429, 500, 503, 504, timeouts, connection errors
// and errors that suggest a client delay. A try that ran out of
// k8s_api_request_timeout is retried with twice the timeout, up to four
// times the setting: an overloaded API server that needs 4 s for a create
// would otherwise fail every try of a 3 s timeout.
//
// A start ends early when a container waits for one of fatal_reasons, when
// a container's image pull fails for the second time (ErrImagePull, a
// back-off, ErrImagePull again; a single failure is often a registry
// hiccup), when the pod ends, and when the pod is deleted or replaced by
// someone else (ErrPodGone). A failed Start returns a *StartError naming
// the Step and the reason, deletes the pod it created, and deletes the
// claim it created (a claim that existed before is never deleted).
//
// # Ownership
//
// Object names can collide: the safe slug scheme keeps 32 bits of a hash,
// and two user names with the same pod name are found in under a second.
// So every object spawnkit creates carries the raw user and server names
// in annotations (written last, so no extra_annotations can forge them),
// and pods and claims carry the id of the start that created them. Before
// deleting, replacing or reusing an existing pod, claim, secret or
// service, the Spawner compares its annotations with its own server; an
// object of another server is a *CollisionError and nothing is deleted or
// mounted. A pod of the same server from an earlier start is stale and is
// replaced; one with this start's id is this start's own (a create whose
// answer was lost) and is kept. Claims without owner annotations (made by
// KubeSpawner or by hand) are reused, so a migrating hub keeps its users'
// homes; pods, secrets and services without them are never deleted.
//
// # Trust model
//
// Owner annotations say whose an object is, but anyone who can create a
// pod in some namespace can write any annotations on it, spawnkit's
// state record included. So a server's ownership is the place and the
// records together (Factory.CheckPlacement). The place: a namespace the
// configuration trusts for the server: its own (namespace, or the
// user's with enable_user_namespaces), one a profile names (a
// kubespawner_override "namespace"; with ProfileListFunc, those
// Config.ProfileNamespaces declares, and a start whose profile names
// another is refused), or one retired_namespaces names. The records: the
// pod's name is the one pod_name_template gives the server today, or the
// one its own state record gives it (the record naming the pod's name,
// namespace and start id, as every pod a start makes records), or the
// one the hub's saved State records. So a server started before a
// change of pod_name_template, namespace or user_namespace_template
// (the old namespaces listed in retired_namespaces) is still found,
// polled and stopped; its next start uses today's configuration (Start
// first removes a pod the server left under its earlier names), keeping
// its claim (State.PVCName, recorded on the pod). The manager applies
// the check to every pod it recovers or adopts and ignores, logs and
// counts a pod elsewhere that claims a server, so a pod planted in
// another tenant's namespace never receives a user's traffic. What
// spawnkit then believes: whoever can create pods in one of those
// namespaces is trusted as much as the hub itself; keep create rights
// there to the hub's service account. A State a hub gives (LoadState,
// manager.Manager.Seed) is trusted in those places only. An unlisted
// choice that lets the user type the namespace ("{value}" in its
// namespace override) cannot be trusted or watched in advance, and the
// manager refuses such a configuration.
//
// # Cancellation and concurrency
//
// A Spawner is safe for concurrent use. Start, Resume, Stop and
// DeleteForever share one operation slot; Poll, State and Server never
// wait for it. Stop first cancels a Start or Resume in flight (or waiting
// for the slot): that start returns a *StartError with reason Cancelled
// wrapping ErrStartCancelled after deleting its pod, keeping its claim;
// then Stop deletes the pod with delete_grace_period (0 means 0) and waits
// until the API server no longer has it, bounded by its ctx. A Start whose
// ctx is cancelled deletes its pod the same way, unless the cause is
// ErrDetach: then it returns at once and leaves everything for Resume,
// which waits for an existing pod to become ready (a controller uses it
// after a restart). Close is terminal: it cancels a start in flight with
// ErrClosed, waits for it, releases the informer holds, and every later
// call returns ErrClosed.
//
// # Poll and State
//
// Poll reads only the shared cache, after its first sync: pending or
// running is "not exited"; a terminated notebook container gives its exit
// code (with Reason Exited or OOMKilled, or Evicted); no pod is exit code
// 1. A stopped pod is deleted when delete_stopped_pods is on, with a UID
// precondition so a newer pod of a racing Start is never touched. Every
// pod records the State of its start in StateAnnotation (names, port,
// SSL, services, pod_connect_ip, user id and options, start id; nothing
// secret), so StateFromPod and LoadState rebuild the exact URL in another
// process.
//
// # Progress
//
// StartOptions.OnProgress (and StopOptions.OnProgress) is called with
// every step, in order, before the call returns; registering it with the
// call means no event can be missed. Pod events move progress a third of
// the way closer to 90%; the final event is 100 and has Ready and the URL,
// or Failed and the reason. StartOptions.Progress (and
// StopOptions.Progress) takes a Stream instead: a replayable stream of the
// same events for any number of readers (NewStream), which never blocks.
//
// # Profiles
//
// Config.ProfileList (KubeSpawner's profile_list, or ProfileListFunc for a
// dynamic one) is applied by Config.Resolve to a start's user options
// (profile, <option>, <option>--unlisted-choice): the profile's overrides,
// then each option's chosen, unlisted (validated by validation_regex, with
// {value} substituted) or default choice's overrides, merged into the
// configuration's options, loaded or built in Go (a mapping merges, null removes a key). Start does this
// itself. As in KubeSpawner, what its __init__ fixes comes from the base
// configuration: the names, working_dir's expansion and port's default;
// a profile's working_dir is used as written, its namespace places the
// objects, and its port 0 is an error (KubeSpawner would send
// containerPort 0). An unlisted value is checked against validation_regex
// even when the user options name no profile (KubeSpawner skips the
// check then). A user's
// unlisted value is data, never code: in the options rendered as templates
// (extra_labels, extra_annotations, environment, volumes, volume_mounts,
// pod_connect_ip) it is escaped so that it renders as itself.
// validation_regex has Python's re.match semantics (anchored at the start
// only) and is compiled when the configuration is loaded. Every option is
// checked with apimachinery's validators before anything is created
// (labels, annotations, quantities, names, ports, timeouts; a templated
// value once rendered for the server, by Plan); all problems
// are reported at once as a *ConfigError whose Keys name the options.
// A configuration document is at most MaxConfigSize bytes, YAML aliases
// may add at most 10,000 values, and merge keys (<<) work.
//
// # Seams for controllers
//
// A hub that runs many servers, as the manager package does, has four
// more calls. Spawner.Plan renders a start's objects and gives them a
// start id; handed to Start as StartOptions.Plan they are what that
// start creates, so the options are checked before the hub commits to
// the start and the start does not render again (a plan serves one
// Start, of a Spawner of the same Factory and server whose names in use
// have not changed since; otherwise Start renders its own).
// StartOptions.Progress takes a Stream, which never blocks, so the pod's
// events are published from the event informer's handler without waking
// the start. PollCache is Poll without its API call (it never deletes a
// stopped pod), for a controller that reports an exit before it cleans
// up. ReadyPod is the pod version the last start found ready, so a
// controller following the pod informer can skip it.
//
// # Clusters
//
// A hub with several clusters behind it makes a Factory per cluster,
// each with its own Client and Options.Cluster naming the cluster (a
// DNS-1123 label; NewFactory refuses anything else). Every object a start
// of such a Factory creates or updates (the user namespace, its
// NetworkPolicy and ResourceQuota, the claim, the pod, the environment
// and internal-SSL Secrets, the service) carries the label
// naming.LabelCluster with that name, over any configured value, and
// State.Cluster records it, in the pod's StateAnnotation too
// (StateFromPod returns it); LoadState keeps the Factory's cluster,
// whatever the loaded state says. The option kubernetes_cluster (one
// name or a list, in order of preference, checked at load and once a
// profile applies; typically a profile's or a choice's override) names
// the clusters a server belongs in: a Factory with a cluster refuses a
// start whose configuration names other clusters only, at Plan and at
// Start's step plan, with a *ProfileError wrapping ErrOtherCluster. A
// Factory without Options.Cluster is a hub with one cluster, as before:
// no label, no State.Cluster, and kubernetes_cluster is ignored (the
// package's Plan, which has no Factory, names no cluster either).
// Config.Override gives a cluster its own base configuration (another
// pod_connect_ip, another image registry): overrides applied as a
// profile's kubespawner_override is, under the profile that Resolve
// applies afterwards.
//
// # Migrating from KubeSpawner
//
// A hub moving from KubeSpawner keeps its running servers and its users'
// homes. With manager.Options.AdoptKubeSpawner the Manager also adopts
// pods labelled app.kubernetes.io/managed-by=kubespawner with the
// configured component label (singleuser-server), attributed by their
// raw hub.jupyter.org/username and servername annotations: such a pod
// records no State, so its server's State is the pod's name and
// namespace and the port of its notebook-port container port; it is
// recovered as running (URL from the pod's IP) or starting, polled and
// stopped like spawnkit's own. Without the option those pods are
// ignored. A hub's saved KubeSpawner state (get_state's pod_name,
// namespace, dns_name and pvc_name) decodes into State and loads with
// LoadState. Config.HandleLegacyNames (handle_legacy_names, default true,
// together with remember_pvc_name) makes a Start of a server whose claim
// is not yet known, when no claim exists under today's name but one
// exists under the name an older KubeSpawner gave it
// (naming.Names.LegacyPVC), use that claim, record it in State.PVCName
// and render {pvc_name} as its name, instead of creating an empty home.
// Unlike KubeSpawner 7, which looks only when a pre-7 state was loaded,
// spawnkit looks whenever the claim is not known. orphan.List attributes
// KubeSpawner's objects with the selector
// "app.kubernetes.io/managed-by in (spawnkit,kubespawner)".
//
// # Kubernetes versions
//
// spawnkit supports Kubernetes 1.32 to 1.37 and its tests run on each
// (README.md, "Kubernetes versions"). CheckServerVersion reads the API
// server's version once through discovery and refuses a server older than
// 1.MinServerMinor with an error (ErrServerTooOld) that names both; the
// Manager calls it before its first watch. Across the supported range
// spawnkit sends the same objects and reads the same fields. Env var
// names are checked at load with the relaxed rule (any printable ASCII
// but '=') that every supported server applies by default; on a 1.32 or
// 1.33 server whose operator turned RelaxedEnvironmentVariableValidation
// off, a name that is not a C identifier fails at create with the API
// server's own error naming the variable.
//
// A server can make a pod without a field spawnkit sent: an older release
// does not know it (hostnameOverride before 1.34), or knows it behind a
// feature gate that is off (hostUsers on 1.32, hostnameOverride on 1.34,
// schedulingGroup on every supported release), or an admission webhook
// removes it; the API server answers the create with success either way.
// Start compares the pod the server returned with the one it sent and,
// when something is missing, fails with a *FieldsDroppedError (Step pod,
// Reason Invalid) naming what and the server's version, and deletes the
// pod: the server configured is not silently replaced by a lesser one.
// Fields listed in allowed_dropped_fields (a path covers what is beneath
// it; "*" any) may be dropped: the start goes on and its progress names
// them. What is compared: every field of the spec that is set (an empty
// object, such as securityContext: {}, counts as not set), by presence,
// not value, since the server and webhooks may normalise or rewrite
// values (a registry mirror rewriting the image); list entries without a
// name (tolerations, arguments) by content, with the RuntimeClass
// plugin's merging of tolerations taken into account; and the keys of
// the labels and annotations. Not caught, then: a value rewritten in
// place (1.32 turns procMount Unmasked back into Default). A field sent
// with the value the server would assume anyway (hostUsers: true on
// 1.32) counts as dropped too: leave it out or allow it.
// KubeSpawner runs such a pod as the server made it. The server-dependent
// tests (reflector, spawner, manager, orphan, the service) run on 1.32
// and 1.37 in CI, and on every supported minor under make test-matrix.
//
// # Not supported
//
// KubeSpawner options that only make sense inside JupyterHub's Python
// process (the options form's HTML templates, Python callables other than
// the id functions, traitlets-specific settings) have no equivalent;
// LoadConfig rejects every unknown option by name instead of ignoring it.
package spawner
