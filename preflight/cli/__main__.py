"""`python -m preflight.cli`."""

from preflight.cli import main

main()
