"""python -m spawnkit_jupyterhub --version."""

import io
import unittest
from contextlib import redirect_stdout

import jupyterhub

import spawnkit_jupyterhub
from spawnkit_jupyterhub.__main__ import main


class VersionTest(unittest.TestCase):
    def test_prints_both_versions(self):
        out = io.StringIO()
        with redirect_stdout(out):
            self.assertEqual(main(["--version"]), 0)
        self.assertEqual(
            out.getvalue().splitlines(),
            [f"spawnkit-jupyterhub {spawnkit_jupyterhub.__version__}", f"jupyterhub {jupyterhub.__version__}"],
        )
