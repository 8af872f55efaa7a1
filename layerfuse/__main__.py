"""`python -m layerfuse ...` = the `layerfuse` command."""

from .cli.main import main

main()
