"""Haystack against a scripted rltap proxy: the shared fixtures (`make_proxy`, no vendor
variables) and telemetry off.

Haystack decides on telemetry when it is imported, before any fixture runs, so its documented
off switch is set here, at collection, as well as by the shared fixture.
"""

import os

os.environ["HAYSTACK_TELEMETRY_ENABLED"] = "False"

pytest_plugins = ["rltap.testing.fixtures"]
