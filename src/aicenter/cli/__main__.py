"""``python -m aicenter.cli``: the same as the ``aicenter`` command."""

from aicenter.cli.main import main

main()
