"""Moved: the in-memory API fake is tests/fakes.py (FakeApi). This name stays while
test_nodelifecycle_logic.py still loads the fake from here by path; it holds no tests."""

from tests.fakes import FakeApi

__all__ = ["FakeApi"]
