"""The operator side: the `turnkeeper` command line and its renderers."""
