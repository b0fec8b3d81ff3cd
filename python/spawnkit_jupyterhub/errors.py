"""The errors SpawnkitSpawner raises, and how JupyterHub sees them.

A SpawnkitError is the service's own verdict (a refusal, a failed pod); a
ServiceUnavailable is the service being unreachable or failing (5xx). On
JupyterHub 6.0 and later, whose SpawnException separates "a spawn that
policy or the user's input refused" (metrics status "failure", no
traceback, not counted towards consecutive_failure_limit) from "an
unexpected system error" (status "error"), start() raises a verdict as a
SpawnException (for_jupyterhub) and leaves ServiceUnavailable an error.
Before 6.0 both are raised as they are. Which JupyterHub is running is
found by feature detection, never by its version number.
"""

import jupyterhub.spawner

__all__ = ["NotTheService", "SpawnkitError", "ServiceTLSError", "ServiceUnavailable", "for_jupyterhub", "spawn_exception_class"]


class SpawnkitError(Exception):
    """The spawner-service refused or failed an operation.

    reason is the service's CamelCase reason (ErrImagePull, Timeout,
    InvalidUserOptions, ...), status the HTTP status when there was one.
    jupyterhub_message is what JupyterHub shows the user ("Spawn failed: ...").
    """

    def __init__(self, message, reason="", status=None):
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.jupyterhub_message = message


class ServiceUnavailable(SpawnkitError):
    """The service could not be reached, or answered with a server error.

    permanent: asking again cannot help (the hub's own settings are
    wrong), so nothing retries it; a start fails at once.
    """

    permanent = False


class ServiceTLSError(ServiceUnavailable):
    """The TLS handshake with the service failed for good: its certificate
    could not be verified (reason TLSVerificationFailed), or the hub's
    own TLS files could not be used (TLSFilesUnusable). The message names
    the service_url and the setting to change."""

    permanent = True


class NotTheService(ServiceUnavailable):
    """Something other than the spawnkit service answered at service_url
    (another server, a wrong port, a proxy's page): the hub's setting is
    wrong, so nothing retries it. The message names the URL and what
    answered."""

    permanent = True


def spawn_exception_class():
    """JupyterHub's SpawnException (6.0 and later), or None."""
    return getattr(jupyterhub.spawner, "SpawnException", None)


# One subclass per SpawnException class seen (there is one per process,
# unless a test swaps it).
_failure_classes = {}


def _failure_class(base):
    cls = _failure_classes.get(base)
    if cls is not None:
        return cls

    class SpawnkitSpawnFailure(base, SpawnkitError):
        """A SpawnkitError that JupyterHub 6.0 takes for a SpawnException:
        the service's reason is its reason label, its 4xx its status code
        (a failed pod is a 500)."""

        def __init__(self, err):
            status = err.status if err.status is not None and 400 <= err.status < 500 else 500
            base.__init__(self, str(err), reason=err.reason or "SpawnFailed", status_code=status)
            self.status = err.status
            self.jupyterhub_message = err.jupyterhub_message

    _failure_classes[base] = SpawnkitSpawnFailure
    return SpawnkitSpawnFailure


def for_jupyterhub(err):
    """The exception to raise to JupyterHub for err.

    A SpawnkitError that is not a ServiceUnavailable becomes, where
    JupyterHub has SpawnException, an exception that is both; anything
    else is returned unchanged.
    """
    base = spawn_exception_class()
    if base is None or not isinstance(err, SpawnkitError) or isinstance(err, (ServiceUnavailable, base)):
        return err
    return _failure_class(base)(err)
