"""The `graph` fixture: the mocks that record the component tree's dependency graph."""

from __future__ import annotations

import pulumi
import pytest

from .wiring import Graph


@pytest.fixture
def graph():
    g = Graph()
    pulumi.runtime.set_mocks(g, project="gpu-fleet", stack="test", preview=False)
    monitor = pulumi.runtime.settings.SETTINGS.monitor
    register = monitor.RegisterResource

    def recording(request):
        response = register(request)
        g.record(request, response.urn)
        return response

    monitor.RegisterResource = recording
    yield g
    pulumi.runtime.settings.reset_options()
