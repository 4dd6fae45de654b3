"""Triton model repositories: a model's ``config.pbtxt`` beside its version directories.

:mod:`servinglib.loaders.triton.config` reads a ``config.pbtxt`` (Triton's own field numbers)
and maps what servinglib implements onto its objects; the fields it does not implement it names.
:mod:`servinglib.loaders.triton.python_model` serves a Python-backend ``TritonPythonModel``
through the python platform, with :mod:`servinglib.loaders.triton.pb_utils` as its
``triton_python_backend_utils``.
"""
