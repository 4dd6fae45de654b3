"""The request path both front ends share: the DataPlane and what it answers with.

The DataPlane (lookup, execution mode, deadline), its worker pool, classify and regress,
the signature cache, model metadata for both protocols, the repository index, model
management, and the Prometheus metrics.  Front ends (``server.rest``, ``server.grpc``) call
it; it calls the ServerCore.
"""
