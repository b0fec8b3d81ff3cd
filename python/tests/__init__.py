"""The Spawner's unit tests.

They run on tornado's simple HTTP client, or, with
SPAWNKIT_TEST_HTTP_CLIENT=curl, on its curl client, which JupyterHub uses
whenever pycurl is installed (configured here as JupyterHub's
init_pycurl does, before any test makes a client). tests/test_tls.py
runs on both either way.
"""

import os

from tornado.httpclient import AsyncHTTPClient

HTTP_CLIENT = os.environ.get("SPAWNKIT_TEST_HTTP_CLIENT", "simple")
if HTTP_CLIENT == "curl":
    AsyncHTTPClient.configure("tornado.curl_httpclient.CurlAsyncHTTPClient")
elif HTTP_CLIENT != "simple":
    raise ValueError(f"SPAWNKIT_TEST_HTTP_CLIENT={HTTP_CLIENT!r}: want simple or curl")
