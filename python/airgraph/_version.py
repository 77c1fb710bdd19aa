"""The package version, the one place the Python code reads it (airgraph.__version__, the compile
cache's keys, the producer written into airgraph files). pyproject.toml's [project] version must
be the same (tests/python/test_smoke.py checks it)."""
__version__ = "0.1.0"
