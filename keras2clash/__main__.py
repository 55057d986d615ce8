"""`python -m keras2clash`: the `keras2clash` command."""

from keras2clash.cli import main

main()
