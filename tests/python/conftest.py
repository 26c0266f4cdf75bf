"""pytest settings shared by tests/python."""


def pytest_configure(config):
    # The label scripts/test's CTest side calls slow: tests over ~5 s on two busy cores.
    # `pytest -m "not slow"` leaves them out.
    config.addinivalue_line("markers", "slow: over ~5 s on two busy cores (as CTest's slow label)")
