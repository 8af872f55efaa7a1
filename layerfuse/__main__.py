"""`python -m layerfuse ...` = the `layerfuse` command."""

from .cli.launch import layerfuse

layerfuse()
