"""Backend.AI-style compute sessions, native in Jupyter."""

__version__ = "0.1.0"
