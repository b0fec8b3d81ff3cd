"""Stand-ins for the parts of JupyterHub 5.x and 6.0 that call a Spawner
and that the JupyterHub installed here (Debian's 3.0) does not have.

Each reproduces, in a few lines written for these tests, the sequence of
calls the named JupyterHub version makes (its source: jupyterhub/user.py,
spawner.py, apihandlers/users.py at the version given); none of it is
JupyterHub's code. What runs against these stubs is unit-tested, not
tested on that JupyterHub: python/README.md says which is which.
"""

import asyncio
from contextlib import contextmanager
from unittest import mock

import jupyterhub.spawner
from tornado import web


def apply_user_options_dict(spawner, mapping, user_options):
    """JupyterHub 5.3's c.Spawner.apply_user_options = {option: attribute}:
    run by user.spawn after the authenticator's and auth_state hooks,
    before pre_spawn_hook and start(). Each option named in the mapping
    is assigned to the attribute; a string the trait refuses is coerced
    with the trait's from_string. Options not in the mapping are left
    alone (and stay in user_options)."""
    traits = spawner.traits()
    for key, value in user_options.items():
        attr = mapping.get(key)
        if attr is None or not hasattr(spawner, attr):
            continue
        try:
            setattr(spawner, attr, value)
        except Exception:
            if attr in traits and isinstance(value, str):
                setattr(spawner, attr, traits[attr].from_string(value))
            else:
                raise


async def stop_pending_spawn(spawner, spawn_task, settle=0.2):
    """JupyterHub 5.1's DELETE of a server whose spawn is pending (#4844):
    the spawn's future is cancelled, the handler sleeps (1 s there), then
    user.stop runs: poll(), stop() when poll says running, clear_state().
    """
    spawn_task.cancel()
    await asyncio.sleep(settle)
    status = await spawner.poll()
    if status is None:
        await spawner.stop()
    spawner.clear_state()
    return status


class SpawnException(web.HTTPError):
    """JupyterHub 6.0's SpawnException, by its documented signature:
    SpawnException(message, *, reason, log_message="", message_html="",
    status_code=400), an HTTPError whose reason is a metrics label."""

    def __init__(self, message, *, reason, log_message="", message_html="", status_code=400):
        self.message = message
        self.log_message_text = log_message or message
        self.message_html = message_html
        super().__init__(status_code, message, reason=reason)
        self.reason = reason


@contextmanager
def jupyterhub6():
    """Makes jupyterhub.spawner look like 6.0's to feature detection: it
    has SpawnException."""
    with mock.patch.object(jupyterhub.spawner, "SpawnException", SpawnException, create=True):
        yield


def spawn_metrics_status(exc):
    """The status label JupyterHub 6.0 gives a failed spawn in
    server_spawn_duration_seconds, and whether it counts towards
    consecutive_failure_limit (handlers/base.py _track_failure_count):
    a SpawnException or an HTTPError below 500 is a "failure" (not
    counted), anything else an "error" (counted)."""
    if isinstance(exc, jupyterhub.spawner.SpawnException):
        return "failure", exc.reason
    if isinstance(exc, web.HTTPError) and exc.status_code < 500:
        return "failure", exc.reason or ""
    return "error", ""


async def rename_server(spawner, new_name):
    """JupyterHub 6.0's PATCH /users/:user/servers/:name {"name": new}
    for a server that is not active: spawner.rename(old, new) with
    _rename_pending set, then the database row is renamed; an exception
    from rename refuses the rename."""
    old_name = spawner.name
    spawner._rename_pending = True
    try:
        await spawner.rename(old_name, new_name)
    finally:
        spawner._rename_pending = False
    return new_name
