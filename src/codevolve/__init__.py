"""codevolve: distributed evolutionary code search."""

__version__ = "0.1.0"
