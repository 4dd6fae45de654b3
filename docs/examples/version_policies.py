"""Which versions each ServableVersionPolicy aspires, given the versions on storage.

Run: .venv/bin/python docs/examples/version_policies.py
"""

from __future__ import annotations

from collections.abc import Callable

from servinglib.errors import InvalidArgumentError
from servinglib.sources import ServableVersionPolicy

ON_STORAGE = [1, 2, 3, 5]

POLICIES = [
    ServableVersionPolicy.latest(),
    ServableVersionPolicy.latest(2),
    ServableVersionPolicy.latest(10),
    ServableVersionPolicy.all(),
    ServableVersionPolicy.specific([2, 3]),
    ServableVersionPolicy.specific([3, 4]),
    ServableVersionPolicy.specific([4]),
]

INVALID: list[Callable[[], ServableVersionPolicy]] = [
    lambda: ServableVersionPolicy.latest(0),
    lambda: ServableVersionPolicy.specific([]),
    lambda: ServableVersionPolicy.specific([-1]),
]


def main() -> None:
    print("on storage:", ON_STORAGE)
    for policy in POLICIES:
        print(f"{policy!s:16} aspires {policy.select(ON_STORAGE)}")
    for make in INVALID:
        try:
            make()
        except InvalidArgumentError as error:
            print(f"{error.code.name}: {error.message}")


if __name__ == "__main__":
    main()
