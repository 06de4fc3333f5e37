"""DSPy against a real rltap proxy (scripted engine, tiny model), pointed at it only by
`dspy.LM("openai/<model>", api_base=..., api_key=...)`."""

from __future__ import annotations

import os

# LiteLLM and DSPy's model metadata download the model cost map on first use unless told to read
# the copy they ship; there is no network here. Set before either is imported.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

pytest_plugins = ["rltap.testing.fixtures"]
