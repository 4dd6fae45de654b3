"""Changing what the server serves from a request: model management and Triton's repository.

Whether and where remote calls may load and unload models or reload the config
(:class:`ModelManagement`), and Triton's model repository extension (index, load,
unload) both front ends call.  Off by default: see the security guide.
"""
