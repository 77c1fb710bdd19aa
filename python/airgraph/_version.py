"""The package version, in one place (airgraph.__version__; pyproject.toml reads it from here)."""
__version__ = "0.1.0"
