"""Observers beside the request path: what the server tells about the calls it answered."""
