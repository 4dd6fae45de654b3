"""Test doubles and waiters for testing servinglib and your own Loaders and Sources.

These are the doubles servinglib's own tests use: :class:`FakeLoader`,
:class:`FakeClock`, :class:`RecordingTarget`, and waiters that wait on
conditions instead of sleeping.
"""

from servinglib.testing._fake_clock import FakeClock as FakeClock
from servinglib.testing._fake_loader import FakeLoader as FakeLoader
from servinglib.testing._fake_loader import LiveCounter as LiveCounter
from servinglib.testing._recording_target import AspiredVersionsCall as AspiredVersionsCall
from servinglib.testing._recording_target import RecordingTarget as RecordingTarget
from servinglib.testing._waiters import run_until as run_until
from servinglib.testing._waiters import wait_for_state as wait_for_state
from servinglib.testing._waiters import wait_until as wait_until

__all__ = [
    "AspiredVersionsCall",
    "FakeClock",
    "FakeLoader",
    "LiveCounter",
    "RecordingTarget",
    "run_until",
    "wait_for_state",
    "wait_until",
]
