"""Changing what the server serves from a request: model management and Triton's repository."""
