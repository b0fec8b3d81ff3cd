// Package kubespawner is KubeSpawner 7.1's configuration as Go values:
// its options, profiles and their resolution, overrides, validation and
// YAML/JSON loading. It makes no API call and holds no client; package
// spawner renders and runs servers from a Config, and package manager runs
// a hub's servers from one.
//
// A Config is a value: every method that makes a configuration (Load,
// Resolve, ResolveWith, Override, WithOptions, WithDefaults) returns a new
// one and never changes its receiver, so one Config may be shared by any
// number of goroutines as long as nobody writes its fields.
//
// # Loading
//
// Load reads one YAML or JSON document of at most MaxConfigSize bytes,
// whose keys are KubeSpawner's option names (c.KubeSpawner.<option>).
// Mapping keys keep their order, merge keys (<<) work, and aliases may
// add only a bounded number of values. An unknown key is an error naming
// it, its line and the option probably meant; a top-level key of Zero to
// JupyterHub's Helm values is named as such. Every value is checked when
// it is loaded, with apimachinery's validators where the API server would
// check it (labels, annotations, quantities, names, ports, timeouts), and
// all problems are reported at once as a *ConfigError whose Keys name the
// options (IsInvalidConfig). A templated value is checked for its syntax
// at load and, rendered for a server, again when the server's objects are
// planned.
//
// # Compatibility with KubeSpawner
//
// A KubeSpawner configuration loads unchanged and means what it means to
// KubeSpawner:
//
//   - Defaults are KubeSpawner's (WithDefaults), DefaultImage included.
//   - Deprecated option names move their value to the new name unless it
//     is set too, with a warning (Warnings); options that no longer do
//     anything are accepted with a warning.
//   - Options that act in the hub rather than on the server's objects
//     (JupyterHub Spawner traits such as default_url, env_keep, ip) are
//     kept in HubOptions; the hub puts their effect into the start's env.
//   - A list option written as a dict is its values sorted by key, as
//     Python's sorted() orders them.
//   - mem_limit and mem_guarantee are JupyterHub's ByteSpecification (an
//     integer, or a number with K, M, G or T, powers of 1024; Kubernetes
//     suffixes are refused, as "1G" means 2^30 bytes there); cpu_limit and
//     cpu_guarantee are floats.
//   - environment keeps its order through overrides, as a Python dict
//     does (a name set again keeps its place, null removes it).
//   - What KubeSpawner's __init__ fixes comes from the base
//     configuration (AtInit): port 0 becomes 8888 and working_dir is
//     expanded there.
//
// Where KubeSpawner would make objects the API server refuses, or a pod
// that can never run, the configuration is refused instead, naming the
// option: at Load (an image with whitespace, an unknown key in a
// profile's override, which KubeSpawner sets as a plain attribute), or,
// for what only a server's values decide, when package spawner plans the
// server's objects. Options that only make sense inside JupyterHub's
// Python process (the options form's templates, Python callables other
// than the id functions) have no equivalent and are refused by name.
//
// # Profiles
//
// Config.ProfileList (profile_list, or ProfileListFunc for a dynamic one)
// is applied by Resolve to a start's user options (profile, <option>,
// <option>--unlisted-choice): the profile's overrides, then each option's
// chosen, unlisted or default choice's overrides, merged into the
// configuration's option values (a mapping merges, null removes a key,
// anything else replaces the option). ResolveWith first applies the hub's
// attributes (HubAttributes). Unknown profiles or choices, and unlisted
// choices that are not enabled or fail validation_regex, are a
// *ProfileError. validation_regex has Python's re.match semantics and is
// compiled when the configuration is loaded. A user's unlisted value is
// data, never code: in the options rendered as templates it is escaped so
// that it renders as itself. The result is validated again, with the
// checks only final values decide (a guarantee above its limit).
//
// # Configurations built in Go
//
// A Config built in Go resolves as the equivalent YAML does: a field at
// its zero value is an absent option. What only Go can set (the id
// functions, ProfileListFunc) is kept through Resolve, Override and
// WithOptions. A Config this package returns carries the option values it
// was made from, and overrides merge into those: a field changed on it
// afterwards is not what a later override merges into.
//
// # Overrides
//
// Override applies overrides as a profile's kubespawner_override does, for
// the base configuration of one cluster of several; WithOptions sets whole
// options as a hub's configuration sets KubeSpawner's traits. Both check
// their result as Load does and keep the receiver's profile list unless
// they set one.
//
// # Limits
//
// MaxUserOptions, MaxUserOptionKeyBytes, MaxUserOptionValueBytes, MaxEnv,
// MaxEnvValueBytes and MaxStateBytes bound what a start takes from its
// caller; input beyond them is a *LimitError, refused before anything is
// created.
package kubespawner
