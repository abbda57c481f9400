"""Fixtures and helpers the tests share, loaded as pytest plugins by tests/conftest.py."""
