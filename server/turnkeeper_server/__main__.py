"""`python -m turnkeeper_server` is `turnkeeper serve`."""

import argparse
import sys

from turnkeeper_server.main import add_serve_arguments, run

parser = argparse.ArgumentParser(prog="python -m turnkeeper_server")
add_serve_arguments(parser)
sys.exit(run(parser.parse_args()))
