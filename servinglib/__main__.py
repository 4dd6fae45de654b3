"""``python -m servinglib``: says that nothing is served yet.

The ``servinglib-server`` command line arrives with the front-end issues; until then this entry
point only reports the installed version and exits successfully.
"""

import sys
from importlib.metadata import version


def main() -> int:
    """Explain on stderr that no models are configured yet; return the exit status."""
    print(
        f"servinglib {version('servinglib')}: no models are configured yet — the "
        "servinglib-server CLI arrives with the front-end issues; see README.md",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
