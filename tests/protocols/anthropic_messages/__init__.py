"""Tests of `rltap.protocols.anthropic_messages`."""
