"""AutoGen AgentChat against a scripted rltap proxy: the shared fixtures (`make_proxy`, no vendor
variables, `AUTOGEN_TELEMETRY=false`)."""

pytest_plugins = ["rltap.testing.fixtures"]
