// Package manifest builds the Kubernetes objects of a user server — pod,
// claim, internal-SSL secret, service, user namespace and owner reference —
// as client-go values, from typed specs.
//
// The builders are pure: no client, no I/O, no clock, no shared state.
// They are safe for concurrent use, never modify or alias their spec (the
// result is a deep copy), and return either a complete object the API
// server accepts or a *ValidationError listing every problem with its
// field and value: a negative port, an unknown toleration operator or
// pull policy, an invalid label, a volume mount without its volume.
//
// # KubeSpawner compatibility
//
// Pod has a field for every argument of KubeSpawner 7.1's make_pod and
// reproduces its output for the inputs KubeSpawner's own objects.py was
// run on. DecodePodSpec and DecodePVCSpec
// read KubeSpawner's argument names and value shapes (JSON), so existing
// configuration ports unchanged. The semantics, including the subtle ones:
//
//   - The notebook container is named "notebook", its port
//     "notebook-port"; restartPolicy is OnFailure; Cmd becomes args.
//   - Environment variables are emitted in rounds: each round, sorted by
//     the key of make_pod's env dict (PodSpec.EnvKeys; the name unless a
//     dict entry has a name of its own), the variables whose $(VAR)
//     references are all emitted already; variables in cycles or
//     referring to unknown names come last, sorted by key. References to
//     the variable itself are ignored and $$(VAR) still counts as a
//     reference. A later entry of the same key, and then a later
//     variable of the same name, replaces an earlier one.
//   - UID, GID, Privileged and AllowPrivilegeEscalation make the container
//     security context; FSGID and SupplementalGIDs the pod's. A
//     ContainerSecurityContext or PodSecurityContext is applied over them
//     key by key (Python's dict.update). IDs of 0 are kept; an empty
//     SupplementalGIDs is omitted; allowPrivilegeEscalation is false
//     unless set otherwise (EscalationUnset omits it).
//   - automountServiceAccountToken is false when neither ServiceAccount nor
//     AutomountServiceAccountToken is set, so a user's pod never gets API
//     credentials by accident.
//   - Zero resource quantities are left out; quantities take Kubernetes
//     notation ("512M", "1.5Gi", "500m") or plain numbers.
//   - ExtraContainerConfig and ExtraPodConfig replace whole top-level
//     fields of the notebook container and the pod spec (no deep merge),
//     after everything else. Keys may be camelCase or snake_case; when
//     both spellings appear the later wins; null removes the field; an
//     unknown key is an error naming it.
//   - Dict-valued arguments (volumes, tolerations, affinities, ...) take
//     camelCase or snake_case top-level keys; nested keys must be the API's
//     camelCase names.
//
// Where KubeSpawner's output is plainly a bug, spawnkit does the right
// thing instead, each deviation a rule over the input with its reason: SSL file paths are joined with '/'
// (KubeSpawner builds "/certsssl.key" from "/certs"); a nested unknown
// key such as security_context.run_as_user in extra_container_config is
// an error (KubeSpawner sends it, and the API server silently drops it);
// a volume mount without its volume in the pod as built (after
// extra_container_config and extra_pod_config) is an error at build time
// rather than at create time; every object carries its kind and
// apiVersion.
//
// # Safe defaults
//
// Beyond KubeSpawner, PodSpec.RestrictedSecurity opts in to the Pod
// Security "restricted" profile (runAsNonRoot, RuntimeDefault seccomp,
// all capabilities dropped, no privilege escalation) for every container,
// filling only what the spec left unset, so that the pod passes the
// upstream pod-security-admission "restricted" policy.
package manifest
