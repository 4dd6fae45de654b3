"""Triton 2.51 and servinglib serve a model of two instances alike: two processes, same names."""

from __future__ import annotations

from pathlib import Path

import tritonclient.http as triton_http

from tests.server.cli.test_model_instances import meet, write_repository
from tests.triton.oracle import running_triton, skip_without_triton


def test_triton_runs_two_instances_named_as_servinglib_names_them(tmp_path: Path) -> None:
    """Triton's two instances of counted are two processes named counted_0_0 and counted_0_1
    that run two calls at once, as servinglib's are (tests/server/cli/test_model_instances.py)."""
    skip_without_triton()
    repository = write_repository(tmp_path / "triton")
    workdir = tmp_path / "work"
    workdir.mkdir()
    with running_triton(repository, workdir) as triton:
        client = triton_http.InferenceServerClient(triton.http_url, concurrency=4)
        try:
            met = meet(client)
        finally:
            client.close()
    assert len({pid for pid, _ in met}) == 2
    assert sorted(name for _, name in met) == ["counted_0_0", "counted_0_1"]
