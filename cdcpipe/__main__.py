"""`python -m cdcpipe`: the same as the `cdcpipe` command."""

from cdcpipe.cli import main

main()
