"""Observers beside the request path: what the server tells about the calls it answered.

Prometheus metrics (and their exposition, summed over worker processes), Triton's
statistics, OpenTelemetry tracing, request logging (its sinks and records) and the
record each finished request leaves.  The DataPlane (``server.plane``) and the front
ends feed them; nothing here changes an answer.
"""
