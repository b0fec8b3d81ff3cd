"""python -m spawnkit_jupyterhub --version: this package's version and the
JupyterHub it runs with."""

import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m spawnkit_jupyterhub",
        description="JupyterHub's Spawner for spawnkit's spawner-service "
        '(c.JupyterHub.spawner_class = "spawnkit").',
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print the versions of spawnkit-jupyterhub (spawnkit's) and of JupyterHub",
    )
    args = parser.parse_args(argv)
    if not args.version:
        parser.print_help()
        return 2
    import jupyterhub

    from . import __version__

    print(f"spawnkit-jupyterhub {__version__}")
    print(f"jupyterhub {jupyterhub.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
