"""Events a shadow model of test_traffic.py blocks on: the python platform loads a model in this
process, so the model and the test share this module.

(Not in conftest.py: a module named ``conftest`` is not unique across test folders.)
"""

from __future__ import annotations

import threading

ENTERED = threading.Event()
"""Set by the blocking model when a call reaches it."""

RELEASE = threading.Event()
"""The blocking model's calls return once it is set."""
