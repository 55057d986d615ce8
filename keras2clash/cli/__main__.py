"""`python -m keras2clash.cli`: the `keras2clash` command."""

from keras2clash.cli import main

main()
