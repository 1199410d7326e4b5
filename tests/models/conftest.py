"""The provider under test: every test taking ``wire`` runs once per API."""

from __future__ import annotations

import pytest
from provider_kit import WIRES, Wire


@pytest.fixture(params=WIRES, ids=lambda w: w.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    chosen: Wire = request.param
    return chosen
