"""The request path both front ends share: the DataPlane, where its calls run, and what it
answers about models.

Execution (lookup, placement, deadline, the worker pool, streams, classify and regress)
and model questions (readiness, status, metadata, the repository index, model
management).  Front ends (``server.rest``, ``server.grpc``) call it; it calls the
ServerCore, and reports each finished call to the observers of ``server.observe``.
"""
