"""KubeSpawner's options as traits, and the hub's configuration of them as
the spawner-service takes it.

Zero to JupyterHub, like most KubeSpawner deployments, configures the
spawner as `c.KubeSpawner.<option>`. traitlets hands a config section only
to classes that have a class of that name in their MRO, so the traits
live on a class named KubeSpawner, which SpawnkitSpawner subclasses. It
is not KubeSpawner: it holds the options and nothing of KubeSpawner's
behaviour (the service builds the pod), and the package does not export
it, so that nobody imports it for the real one.

The option list, kubespawner_options.json, comes from the Go side (a Go
test, kubespawner/pyoptions_test.go, keeps it equal to what the service's
kubespawner.Load accepts and to docs/kubespawner-options.md): each entry has a
name, a status (supported, deviates, hub, deprecated, spawnkit, not
applicable), the note of the table for "deviates" and "not applicable",
and the default the service uses. Options JupyterHub's own Spawner has
(cmd, args, environment, cpu_limit, start_timeout, ...) stay JupyterHub's
traits; every other one becomes an Any trait here: the service checks the
values' types on each start and names the option it refuses.
"""

import copy
import datetime
import inspect
import json
import math
import os
import unicodedata

from jupyterhub.spawner import Spawner
from traitlets import Any, TraitError
from traitlets.config.loader import LazyConfigValue

from .errors import SpawnkitError

__all__ = ["OPTIONS", "KubeSpawner"]

_OPTIONS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kubespawner_options.json")


def _load_options():
    with open(_OPTIONS_FILE, encoding="utf-8") as f:
        entries = json.load(f)
    return {e["name"]: e for e in entries}


# name -> {"name", "status", "note", "default"}, in the file's (name) order.
OPTIONS = _load_options()

# The reason given for a configuration the service cannot honour.
INVALID_CONFIGURATION = "InvalidConfig"

# Python hooks on KubeSpawner's objects and Jinja templates of its form:
# they run inside KubeSpawner, in the hub, on objects the service builds.
_HUB_ONLY = {
    "modify_pod_hook": (
        "it is a Python callable that KubeSpawner runs on the pod object, and the spawnkit service "
        "builds the pod (in Go), so the hook would never run. Set the pod's fields with "
        "extra_pod_config / extra_container_config, a profile's kubespawner_override, or a Go hook "
        "(spawner.Options) in the service"
    ),
    "after_pod_created_hook": (
        "it is a Python callable that KubeSpawner runs after creating the pod, and the spawnkit "
        "service creates the pod (in Go), so the hook would never run. Use a Go hook "
        "(spawner.Options) in the service, or extra_pod_config / a profile's kubespawner_override "
        "for what it set on the pod"
    ),
    "profile_form_template": (
        "it is a Jinja template KubeSpawner renders in the hub, and the spawnkit service renders the "
        "profile form itself; set options_form (a string or a callable) to serve a form of your own"
    ),
    "additional_profile_form_template_paths": (
        "it holds Jinja templates for KubeSpawner's profile form, which the spawnkit service renders "
        "itself; set options_form (a string or a callable) to serve a form of your own"
    ),
}


class _Option(Any):
    """An option's trait: any value (KubeSpawner's values may be callables,
    Kubernetes client objects, ...), its default copied per spawner so
    that a spawner changing a list or dict in place changes no other."""

    def default(self, obj=None):
        return copy.deepcopy(self.default_value)


def _help(entry):
    name, status, note = entry["name"], entry["status"], entry.get("note", "")
    if name in _HUB_ONLY:
        return f"KubeSpawner's {name}. Not supported by SpawnkitSpawner: setting it fails at hub start, because {_HUB_ONLY[name]}."
    text = {
        "supported": f"KubeSpawner's {name}: sent to the spawnkit service with each start, which applies it as KubeSpawner does.",
        "deviates": f"KubeSpawner's {name}: sent to the spawnkit service with each start, which applies it as KubeSpawner does, except: {note}",
        "deprecated": f"KubeSpawner's deprecated {name}: sent as it is; the spawnkit service warns, as KubeSpawner does.",
        "spawnkit": f"spawnkit's own option {name} (not KubeSpawner's): sent to the spawnkit service with each start.",
        "hub": f"KubeSpawner's {name}, which acts in the hub: sent to the spawnkit service when it is a JSON value, never called.",
        "not applicable": f"Not an option spawnkit takes ({note}). Setting it fails at hub start.",
    }.get(status, f"KubeSpawner's {name} ({status}).")
    return text + " Callable values are called with the spawner, as KubeSpawner does, for each start."


async def _options_only(self, *args, **kwargs):
    raise NotImplementedError("this KubeSpawner only holds the options: JupyterHub's spawner is SpawnkitSpawner")


def _load_config(self, cfg, section_names=None, traits=None):
    """traitlets' _load_config, after giving the options that a config
    changes in place (c.KubeSpawner.extra_labels.update({...}),
    c.KubeSpawner.init_containers.append(...), as z2jh's extraConfig
    does) the empty container KubeSpawner has as their default: theirs
    here is None, which traitlets' lazy values would leave None."""
    for section in section_names or self.section_names():
        if section not in cfg:
            continue
        for name, value in cfg[section].items():
            if not isinstance(value, LazyConfigValue) or name not in OPTIONS or not self.has_trait(name):
                continue
            ops = value.to_dict()
            if not ops or getattr(self, name) is not None:
                continue
            self.set_trait(name, {} if "update" in ops else [])
    return super(KubeSpawner, self)._load_config(cfg, section_names=section_names, traits=traits)


def _namespace():
    ns = {
        "__module__": __name__,
        "__qualname__": "KubeSpawner",
        "__doc__": """The KubeSpawner options, for SpawnkitSpawner to read from
        c.KubeSpawner.<option> (see the module's docstring). Not KubeSpawner,
        and not a spawner by itself.""",
        # JupyterHub's Spawner refuses a subclass without them.
        "start": _options_only,
        "stop": _options_only,
        "poll": _options_only,
        "_load_config": _load_config,
    }
    for name, entry in OPTIONS.items():
        # JupyterHub's own traits (and its deprecated properties, such as
        # 3.0's oauth_scopes) stay as JupyterHub defines them.
        if hasattr(Spawner, name):
            continue
        ns[name] = _Option(default_value=copy.deepcopy(entry.get("default")), allow_none=True, help=_help(entry)).tag(
            config=True
        )
    return ns


# Made by the metaclass from a namespace, as a class statement would, so
# that traitlets sets the generated traits up with the class.
KubeSpawner = type(Spawner)("KubeSpawner", (Spawner,), _namespace())


# --- which options the hub set ---------------------------------------------


def config_sections(spawner, name):
    """The config sections (Spawner, KubeSpawner, SpawnkitSpawner, ...) of
    the spawner's MRO that set name, lowest priority first."""
    cfg = spawner.config
    return [s for s in spawner.section_names() if s in cfg and name in cfg[s]]


def option_source(spawner, name):
    """How the hub's configuration names the option: c.<Section>.<name> of
    the section that won, else c.KubeSpawner.<name>."""
    sections = config_sections(spawner, name)
    return f"c.{sections[-1] if sections else 'KubeSpawner'}.{name}"


def _differs(a, b):
    try:
        return bool(a != b)
    except Exception:
        return True


def options_set(spawner):
    """The options of the list that this spawner has a value for: set by
    the configuration (any section of its MRO) or since (a pre_spawn_hook,
    apply_user_options), or otherwise different from their default.

    Traits that are not configuration (JupyterHub 3.0's admin_access,
    cookie_options and internal_ssl settings, which JupyterHub sets on
    every spawner itself and passes in the environment) are left out."""
    traits = spawner.traits()
    # The names the configuration sets, gathered once: this runs for
    # every start, and asking config_sections for each of the options
    # (each call walks the MRO's section names) was a quarter of its cost
    # in a burst of 1,000 starts (issue 47).
    cfg = spawner.config
    configured = {n for s in spawner.section_names() if s in cfg for n in cfg[s]}
    names = []
    for name in OPTIONS:
        trait = traits.get(name)
        if trait is None or not trait.metadata.get("config"):
            continue
        if name in configured or _differs(getattr(spawner, name), spawner.trait_defaults(name)):
            names.append(name)
    return names


def kubespawner_configured(spawner, names):
    """Whether the hub configures the pod itself (KubeSpawner-style), so
    that the configuration goes with each start: an option that is not
    JupyterHub's own nor acts in the hub has a value, or an option is
    set in a c.KubeSpawner section. A hub that sets none (its KubeSpawner
    options are in the service's YAML, and it sets JupyterHub's cmd,
    environment, start_timeout, ... only) starts servers as before."""
    for name in names:
        if not hasattr(Spawner, name) and OPTIONS[name]["status"] != "hub":
            return True
        if "KubeSpawner" in config_sections(spawner, name):
            return True
    return False


def refuse_unsupported(spawner):
    """Raises TraitError for an option the service cannot honour that has a
    value: a "not applicable" option (the table's note says why), or a
    hook or template that only KubeSpawner itself could run."""
    for name, entry in OPTIONS.items():
        if not spawner.has_trait(name):
            continue
        if name in _HUB_ONLY:
            # KubeSpawner's own defaults ("" and []) are fine, as z2jh may
            # write them.
            if getattr(spawner, name) in (None, "", [], ()):
                continue
            reason = _HUB_ONLY[name]
        elif entry["status"] == "not applicable":
            if getattr(spawner, name) is None and not config_sections(spawner, name):
                continue
            reason = entry.get("note") or "spawnkit does not take it"
        else:
            continue
        raise TraitError(f"{option_source(spawner, name)} cannot be used with SpawnkitSpawner: {reason}")


# --- values -----------------------------------------------------------------


class NotJSON(Exception):
    def __init__(self, path, value):
        super().__init__(path)
        self.path = path
        self.value = value


def to_json(value, path=""):
    """value as the service takes it: JSON values as they are, datetimes
    as ISO 8601, and Kubernetes client models (objects with openapi_types
    and attribute_map, as kubernetes(_asyncio).client.V1Container) as
    ApiClient().sanitize_for_serialization makes them: their attributes
    that are not None, under their API (camelCase) names. Raises NotJSON
    naming where a value is none of these."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(path, value)
        return value
    if isinstance(value, (list, tuple)):
        return [to_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotJSON(f"{path}[{k!r}] (key)", k)
            out[k] = to_json(v, f"{path}[{k!r}]")
        return out
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    types = getattr(value, "openapi_types", None)
    names = getattr(value, "attribute_map", None)
    if isinstance(types, dict) and isinstance(names, dict) and not isinstance(value, type):
        out = {}
        for attr in types:
            v = getattr(value, attr, None)
            if v is not None:
                out[names.get(attr, attr)] = to_json(v, f"{path}.{attr}")
        return out
    raise NotJSON(path, value)


def invalid(spawner, name, err):
    what = type(err.value).__name__
    if callable(err.value):
        what = f"callable ({what})"
    where = f"{option_source(spawner, name)}{err.path}"
    return SpawnkitError(
        f"{where} is a {what} value, which cannot be sent to the spawnkit service: it takes JSON values, "
        "Kubernetes client objects, and callables where KubeSpawner calls them (the option itself, an "
        "environment value, a profile's kubespawner_override value)",
        reason=INVALID_CONFIGURATION,
        status=400,
    )


async def call(spawner, fn, where):
    """fn(spawner), awaited when it returns an awaitable, as KubeSpawner
    calls an option's callable; a failure is logged naming the option."""
    try:
        value = fn(spawner)
        if inspect.isawaitable(value):
            value = await value
    except Exception:
        spawner.log.error("spawnkit: the callable of %s failed for %s", where, spawner._log_name)
        raise
    return value


# --- profiles ---------------------------------------------------------------


def slugify(text):
    """A profile's slug from its display_name: KubeSpawner's
    (python-slugify), as the service has it (naming.Slugify): accents
    dropped, ASCII letters and digits lowercased, every other run of
    characters one "-", none at either end."""
    out = []
    dash = False
    for ch in unicodedata.normalize("NFKD", str(text)):
        if unicodedata.category(ch) == "Mn":
            continue
        for c in ch.lower():
            if c < "\x80" and c.isalnum():
                out.append(c)
                dash = False
            elif not dash and out:
                out.append("-")
                dash = True
    return "".join(out).rstrip("-")


def profile_slug(profile):
    return profile.get("slug") or slugify(profile.get("display_name", ""))


def _chosen_key(options, key):
    """A user option as the service reads it: a string, or a list of one."""
    value = options.get(key)
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    return value if isinstance(value, str) else ""


def choose_profile(profiles, user_options):
    """The index of the profile a start uses (the one user_options
    "profile" names, else the first with default: true, else the first),
    or None when user_options names a profile the list does not have (the
    service refuses it)."""
    requested = (user_options or {}).get("profile")
    if isinstance(requested, (list, tuple)) and len(requested) == 1:
        requested = requested[0]
    dicts = [(i, p) for i, p in enumerate(profiles) if isinstance(p, dict)]
    if not dicts:
        return None
    if requested:
        for i, p in dicts:
            if isinstance(requested, str) and profile_slug(p) == requested:
                return i
        return None
    for i, p in dicts:
        if p.get("default"):
            return i
    return dicts[0][0]


def _choice_key(option, user_options, name):
    """The chosen entry of a profile option: ("unlisted", None) for an
    unlisted value, ("choice", key) otherwise (the choice the user options
    name, else the one with default: true, else the first)."""
    if _chosen_key(user_options, f"{name}--unlisted-choice"):
        return "unlisted", None
    choices = option.get("choices") if isinstance(option.get("choices"), dict) else {}
    asked = _chosen_key(user_options, name)
    if asked:
        return "choice", asked
    for key, choice in choices.items():
        if isinstance(choice, dict) and choice.get("default"):
            return "choice", key
    return "choice", next(iter(choices), None)


async def _override(spawner, override, evaluate, where):
    """A copy of a kubespawner_override: its callable values called with
    the spawner (evaluate), or left out (an entry this start does not use)."""
    if not isinstance(override, dict):
        return override
    out = {}
    for key, value in override.items():
        if callable(value):
            if not evaluate:
                continue
            value = await call(spawner, value, f"{where}[{key!r}]")
        out[key] = value
    return out


async def resolve_profile_list(spawner, profiles, user_options, where="c.KubeSpawner.profile_list"):
    """The profile list to send, and the chosen profile's slug.

    As KubeSpawner's load_user_options, the callables of the chosen
    profile's kubespawner_override, and of the chosen choice's (or the
    unlisted choice's) of each of its profile_options, are called with the
    spawner; the callables of every other entry are left out: this start
    never uses them. With user_options None (the options form) no profile
    is chosen, and every such callable is left out."""
    if not isinstance(profiles, (list, tuple)):
        return profiles, None
    chosen = None if user_options is None else choose_profile(profiles, user_options)
    out = []
    for i, profile in enumerate(profiles):
        if not isinstance(profile, dict):
            out.append(profile)
            continue
        this = i == chosen
        p = dict(profile)
        if "kubespawner_override" in p:
            p["kubespawner_override"] = await _override(
                spawner, p["kubespawner_override"], this, f"{where}[{i}]['kubespawner_override']"
            )
        if isinstance(p.get("profile_options"), dict):
            options = {}
            for name, option in p["profile_options"].items():
                if not isinstance(option, dict):
                    options[name] = option
                    continue
                kind, key = _choice_key(option, user_options or {}, name) if this else (None, None)
                o = dict(option)
                ow = f"{where}[{i}]['profile_options'][{name!r}]"
                if isinstance(o.get("choices"), dict):
                    choices = {}
                    for ck, choice in o["choices"].items():
                        if isinstance(choice, dict) and "kubespawner_override" in choice:
                            choice = dict(choice)
                            choice["kubespawner_override"] = await _override(
                                spawner,
                                choice["kubespawner_override"],
                                kind == "choice" and ck == key,
                                f"{ow}['choices'][{ck!r}]['kubespawner_override']",
                            )
                        choices[ck] = choice
                    o["choices"] = choices
                unlisted = o.get("unlisted_choice")
                if isinstance(unlisted, dict) and "kubespawner_override" in unlisted:
                    unlisted = dict(unlisted)
                    unlisted["kubespawner_override"] = await _override(
                        spawner,
                        unlisted["kubespawner_override"],
                        kind == "unlisted",
                        f"{ow}['unlisted_choice']['kubespawner_override']",
                    )
                    o["unlisted_choice"] = unlisted
                options[name] = o
            p["profile_options"] = options
        out.append(p)
    slug = profile_slug(profiles[chosen]) if chosen is not None else None
    return out, slug


# JupyterHub's own Spawner traits that its get_env turns into variables
# (MEM_LIMIT, ..., JUPYTERHUB_DEFAULT_URL, JUPYTERHUB_ROOT_DIR, ...).
HUB_ENV_TRAITS = (
    "mem_limit",
    "mem_guarantee",
    "cpu_limit",
    "cpu_guarantee",
    "default_url",
    "notebook_dir",
    "debug",
    "disable_user_config",
)


def chosen_hub_overrides(profiles, user_options):
    """What the chosen profile's and choices' kubespawner_override set of
    HUB_ENV_TRAITS, in KubeSpawner's order (the profile's, then each
    option's choice), from a profile list resolve_profile_list made (its
    chosen callables already called). KubeSpawner sets these on the
    spawner in load_user_options, before get_env: the variables they make
    must say what the profile chose."""
    if not isinstance(profiles, (list, tuple)) or not profiles:
        return {}
    chosen = choose_profile(profiles, user_options or {})
    if chosen is None:
        return {}
    profile = profiles[chosen]
    out = {}

    def take(override, value=None):
        if not isinstance(override, dict):
            return
        for key in HUB_ENV_TRAITS:
            if key in override:
                v = override[key]
                if value is not None and isinstance(v, str):
                    v = v.replace("{value}", value)
                out[key] = v

    take(profile.get("kubespawner_override"))
    options = profile.get("profile_options")
    if isinstance(options, dict):
        for name, option in options.items():
            if not isinstance(option, dict):
                continue
            kind, key = _choice_key(option, user_options or {}, name)
            if kind == "unlisted":
                unlisted = option.get("unlisted_choice")
                if isinstance(unlisted, dict):
                    take(unlisted.get("kubespawner_override"), _chosen_key(user_options or {}, f"{name}--unlisted-choice"))
                continue
            choices = option.get("choices")
            if isinstance(choices, dict) and isinstance(choices.get(key), dict):
                take(choices[key].get("kubespawner_override"))
    return out


# --- the configuration sent --------------------------------------------------


async def hub_config(spawner, user_options):
    """The hub's configuration of the pod as the service takes it, and the
    slug of the profile chosen (None without a profile_list).

    Empty when the hub does not configure KubeSpawner options
    (kubespawner_configured). Otherwise every option of the list that has
    a value (options_set), callables called as KubeSpawner calls them:
    an option's value (uid, gid, fs_gid, supplemental_gids,
    profile_list, ...), environment values, and the kubespawner_override
    values of the chosen profile and choices (resolve_profile_list).
    Options that act in the hub are sent only when they are JSON values:
    their callables (pre_spawn_hook, options_form, auth_state_hook, ...)
    run in the hub, not in the service.

    user_options None stands for the options form: no profile is chosen,
    and no callable but profile_list is called (callable options are left
    out; they are called at the start).

    Raises SpawnkitError (400, InvalidConfig) naming an option
    whose value cannot be sent, TraitError for an option the service
    cannot honour (refuse_unsupported)."""
    refuse_unsupported(spawner)
    names = options_set(spawner)
    if not kubespawner_configured(spawner, names):
        return {}, None
    form = user_options is None
    config = {}
    slug = None
    for name in names:
        value = getattr(spawner, name)
        if OPTIONS[name]["status"] == "hub":
            if callable(value):
                continue
            try:
                config[name] = to_json(value)
            except NotJSON:
                spawner.log.debug("spawnkit: %s is not sent to the service (not a JSON value)", name)
            continue
        where = option_source(spawner, name)
        if name == "profile_list":
            if callable(value):
                value = await call(spawner, value, where)
            if value is None:
                value = []
            value, slug = await resolve_profile_list(spawner, value, user_options, where)
        elif name == "environment" and isinstance(value, dict):
            env = {}
            for key, v in value.items():
                if callable(v):
                    if form:
                        continue
                    v = await call(spawner, v, f"{where}[{key!r}]")
                env[key] = v
            value = env
        elif callable(value):
            if form:
                continue
            value = await call(spawner, value, where)
        try:
            config[name] = to_json(value)
        except NotJSON as e:
            raise invalid(spawner, name, e) from None
    return config, slug
