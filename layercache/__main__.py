"""`python -m layercache ...` = the `layercache` command."""

from .cli.main import main

main()
