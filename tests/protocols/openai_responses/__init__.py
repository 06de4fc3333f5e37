"""Tests of `rltap.protocols.openai_responses`."""
