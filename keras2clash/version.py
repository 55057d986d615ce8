"""The package's version, in a module of its own: the stages that record it (the project's
manifest, the cabal file) import it from here, below everything; `keras2clash/__init__.py`
imports the whole API."""

__version__ = "0.1.0"
