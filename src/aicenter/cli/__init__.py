"""The ``aicenter`` command line (Typer), built on the SDK in aicenter.client."""
