"""aicenter: a one-stop platform for AI computing centers."""

__version__ = "0.1.0"
