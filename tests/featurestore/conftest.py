"""Fixtures of the featurestore tests: one tiny demo corpus shared by the tests that only read it."""

from __future__ import annotations

import pytest

from tests.featurestore.helpers import TINY_DEMO


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory):
    """``(folder, DemoInfo)`` of the demo corpus built once with :data:`TINY_DEMO` (read it only;
    copy it to change it). Building one takes 10-40 s, so the demo and extraction tests share it."""
    from featurestore import demo

    out = tmp_path_factory.mktemp("tiny_demo")
    info = demo.build_demo(out, progress=False, **TINY_DEMO)
    return out, info
