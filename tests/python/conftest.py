"""pytest settings shared by tests/python."""


def pytest_configure(config):
    # The label scripts/test's CTest side calls slow: tests over ~5 s on two busy cores.
    # `pytest -m "not slow"` leaves them out.
    config.addinivalue_line("markers", "slow: over ~5 s on two busy cores (as CTest's slow label)")


# The files that take longest, longest first (seconds on a fresh 2-core machine, pytest
# --durations). scripts/test runs the files on two workers, a file to a worker (pytest-xdist's
# loadfile), in collection order: alphabetically the longest ones (test_ray, test_sb3) came
# last, and one worker ran them alone for the last ~30 s. Longest first balances the two.
_LONGEST_FIRST = ["test_optimize.py", "test_ray.py", "test_sb3.py", "test_outcomes.py",
                  "test_python_api.py", "test_cli.py", "test_bridge.py"]


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order
