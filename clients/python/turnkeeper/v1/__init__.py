"""Generated from protos/turnkeeper/v1 by protos/generate.py. Do not edit."""
