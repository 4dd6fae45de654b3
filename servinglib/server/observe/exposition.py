"""The Prometheus text format of a scrape, with TF Serving's exact names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TF_SERVING_PREFIX = ":tensorflow:"
"""The names of TF Serving's metrics as its exporter writes them begin so."""

_CREATED = "_created"


def render(families: Iterable[Any]) -> bytes:
    """The text format (``text/plain; version=0.0.4``) of prometheus-client metric families.

    ``families``: what a registry's ``collect()`` yields.
    Thread safety: a pure function of its argument.
    """
    from prometheus_client.utils import floatToGoString

    lines: list[str] = []
    for family in families:
        name: str = family.name
        kind: str = family.type
        tf_serving = name.startswith(TF_SERVING_PREFIX)
        exported = exported_name(name, kind)
        kind = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}.get(kind, kind)
        documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {exported} {documentation}\n")
        lines.append(f"# TYPE {exported} {kind}\n")
        for sample in family.samples:
            sample_name: str = sample.name
            if sample_name.endswith(_CREATED):
                continue
            if tf_serving and kind == "counter":
                sample_name = name  # TF Serving's counter sample has the family's own name
            labels = ",".join(
                f'{key}="{_escaped(value)}"' for key, value in sorted(sample.labels.items())
            )
            label_text = f"{{{labels}}}" if labels else ""
            value = floatToGoString(sample.value)  # type: ignore[no-untyped-call]
            lines.append(f"{sample_name}{label_text} {value}\n")
    return "".join(lines).encode("utf-8")


def exported_name(name: str, kind: str) -> str:
    """The name a family of ``kind`` is written under: servinglib's counters end in ``_total``."""
    return name + "_total" if kind == "counter" and not name.startswith(TF_SERVING_PREFIX) else name


def _escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
