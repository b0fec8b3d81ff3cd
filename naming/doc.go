// Package naming renders the names of a user server's Kubernetes objects
// from templates, reproducing KubeSpawner 7.1's naming to the byte so that
// a hub moving from KubeSpawner finds its users' pods, claims and
// namespaces under the names KubeSpawner gave them.
//
// It is pure: no client, no I/O, no clock. Every function and type is safe
// for concurrent use.
//
// # Slug schemes
//
// A user name such as "Alice.Smith@example.com" cannot be part of an object
// name as it is. KubeSpawner has two ways to make it fit, and so does
// spawnkit (Options.Scheme):
//
//   - SchemeSafe (the default, KubeSpawner's since 7.0): a name that is
//     already a valid object name is kept ("alice" stays "alice"); any
//     other is reduced to its safe characters and given a hash suffix
//     ("Alice" becomes "alice---3bc51062"). Names are readable, always
//     valid and at most 48 characters per part; a name containing "--" is
//     always hashed, so "{user}--{server}" joins cannot be forged, and
//     hashed names contain "---" exactly once. Hashed names CAN collide:
//     the suffix keeps 32 bits of a sha256, so two user names with the
//     same pod name can be found (KubeSpawner has the same weakness, and
//     byte compatibility keeps it). Safety comes from
//     ownership, not from names: the spawner package never deletes,
//     replaces or reuses an object whose annotations name another server.
//     Choose it for every new deployment.
//   - SchemeEscape (KubeSpawner before 7.0): every character outside
//     [a-z0-9] becomes '-' and the hex of its UTF-8 bytes ("Alice" becomes
//     "-41lice"). It is injective but unbounded in length, so long or
//     unusual names give names the API server rejects; Namer reports those
//     as errors. Choose it only to keep the names of objects an older
//     KubeSpawner created (or render Names.LegacyPVC, the claim name such
//     a KubeSpawner would have used, and look for it before creating one).
//
// SafeLabel applies the safe scheme to label values (the
// hub.jupyter.org/username and servername labels); annotations keep the raw
// names (Annotations), so the server an object belongs to can always be
// read back from the cluster.
//
// Lengths count Unicode code points and lowercasing follows Python's
// str.lower, as in KubeSpawner. The one deliberate difference: KubeSpawner
// accepts a handful of non-ASCII letters (U+0130, U+0131, U+017F, the
// Kelvin sign) inside label values, which the API server rejects; spawnkit
// hashes them instead.
//
// # Templates
//
// Templates come in two syntaxes (Syntax): KubeSpawner's Python-format
// placeholders ("jupyter-{user_server}"), so that existing configuration
// ports unchanged, with Python's conversions and format specs
// ("{userid:06d}", "{username:>8}", "{unescaped_username!r}") meaning what
// str.format makes of KubeSpawner's values (userid an int, the rest
// strings), and Go's text/template over Fields with sprig's hermetic text
// functions ("jupyter-{{ .UserServer | trunc 40 }}"), without any
// function that reads the clock, the environment, random sources or the
// network. A Go template may read only the top-level fields (.Username),
// call those functions and text/template's builtins (not call), and use
// if/else; variables, the bare dot, field chains, range, with, define,
// block and template are rejected by Parse, naming the template and the
// construct. Functions whose output size an argument chooses (repeat,
// indent, nindent) fail beyond 64 KiB, and the list builders (until,
// untilStep, seq) are absent. Parse checks every field and function once;
// Execute then never fails for a reason Parse could have seen, apart from
// those size limits. As in KubeSpawner, trailing
// '-' characters are stripped from a rendered value unless the template
// itself ends in '-'.
//
// Fields has every KubeSpawner field: username, servername, user_server
// (scheme-dependent), userid, hubnamespace ("user" when the hub runs in
// "default"), the unescaped_*, safe_* and escaped_* variants, and the
// rendered pod_name, pvc_name and namespace.
//
// # Names
//
// A Namer renders a server's names in KubeSpawner's order (user namespace,
// pod, DNS name, secret, claim), each template seeing the names before it;
// a template that uses a later name is rejected by New instead of
// rendering KubeSpawner's "pod_name_unavailable!". Names validates the
// result: the pod name and user namespace, which every server uses, must
// be DNS-1123 labels (the pod name doubles as hostname and service name),
// or Names fails. The secret, claim and DNS names must be DNS-1123
// subdomains, but KubeSpawner renders them whether a server uses them or
// not, so Names.Check reports them and the caller refuses one only where
// it is used (spawner: a claim name when the claim is made). An invalid
// name is an *InvalidNameError that names the field, the template and the
// value, returned before any object reaches the API server. Inputs no
// hub can have (an empty user name, a user or server name with a NUL byte or invalid UTF-8) are an
// *InvalidNameError too (ValidateServer), where KubeSpawner would hash
// them into a name; every other name renders exactly as in KubeSpawner.
//
// ParseValue and Value.Expand render templated configuration of any shape
// (volumes, mounts, environment), as KubeSpawner's _expand_all does.
package naming
