"""What the slim install carries: the adapters' surface of rltap imports none of its extras."""

from __future__ import annotations

import pytest

from rltap.testing.imports import SLIM_SURFACE, optional_imports


@pytest.mark.parametrize("module", SLIM_SURFACE)
def test_the_slim_surface_imports_none_of_the_extras(module: str) -> None:
    assert optional_imports(module) == []


def test_a_module_that_needs_the_server_stack_is_reported_with_its_importer() -> None:
    assert "llguidance <- rltap.chat.constraints" in optional_imports("rltap.session.session")
