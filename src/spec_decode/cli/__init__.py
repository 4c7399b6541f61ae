"""The ``spec-decode`` command line: a thin layer over the library (entry point ``cli.app:app``)."""
