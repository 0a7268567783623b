"""The package version (one place; results record it)."""

__version__ = "0.1.0"
