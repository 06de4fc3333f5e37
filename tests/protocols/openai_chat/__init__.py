"""Tests of `rltap.protocols.openai_chat`."""
