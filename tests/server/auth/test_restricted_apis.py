"""RestrictedApis, Restriction and Credential: Triton's flag syntax, the check, rotation."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from servinglib.errors import PermissionDeniedError, UnauthenticatedError
from servinglib.server.auth import (
    GRPC_KEY_PREFIX,
    ApiGroup,
    Credential,
    RestrictedApis,
    Restriction,
)

SECRET = "s3cret-token"


def test_flag_syntax_is_tritons() -> None:
    """GROUP[,GROUP...]:KEY=VALUE splits at the first ':' and the first '=' (VALUE keeps '=')."""
    [restriction] = RestrictedApis.http(["inference,metadata:X-Api-Key=a=b:c"]).restrictions
    assert restriction.groups == {ApiGroup.INFERENCE, ApiGroup.METADATA}
    assert restriction.key == "x-api-key"
    assert restriction.credential.matches(b"a=b:c")


def test_grpc_keys_carry_tritons_prefix() -> None:
    """--grpc_restricted_protocol's KEY is sent as triton-grpc-protocol-KEY, as Triton wants."""
    [restriction] = RestrictedApis.grpc(["inference:infer-key=v"]).restrictions
    assert restriction.key == GRPC_KEY_PREFIX + "infer-key" == "triton-grpc-protocol-infer-key"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["inference"], "GROUP"),
        (["inference:key"], "GROUP"),
        ([":key=v"], "GROUP"),
        (["inference:=v"], "GROUP"),
        (["inference:key="], "GROUP"),
        (["admin:key=v"], "unknown API group 'admin'"),
        (["inference,inference:key=v"], "twice"),
        (["inference:a=1", "metadata,inference:b=2"], "'inference' is restricted twice"),
        (["inference:bad key=v"], "header name"),
        (["inference:a\r\nb=v"], "header name"),
        (["inference:k-bin=v"], "-bin"),
    ],
)
def test_malformed_values_are_refused(values: list[str], message: str) -> None:
    """Each malformed value is a ValueError naming what is wrong, never quoting the value."""
    with pytest.raises(ValueError, match=message) as caught:
        RestrictedApis.http(values)
    assert "=v" not in str(caught.value)


def test_a_malformed_value_does_not_echo_its_secret() -> None:
    """A value without KEY= is refused without repeating it (it may be the credential)."""
    with pytest.raises(ValueError, match="GROUP") as caught:
        RestrictedApis.http([f"inference:{SECRET}"])
    assert SECRET not in str(caught.value)


def test_check_answers_unauthenticated_then_permission_denied() -> None:
    """No header is UNAUTHENTICATED, another value PERMISSION_DENIED; neither names a value."""
    restriction = Restriction([ApiGroup.INFERENCE], "authorization", Credential(SECRET))
    restriction.check(ApiGroup.INFERENCE, SECRET.encode())
    with pytest.raises(UnauthenticatedError, match="'authorization'"):
        restriction.check(ApiGroup.INFERENCE, None)
    with pytest.raises(PermissionDeniedError) as caught:
        restriction.check(ApiGroup.INFERENCE, b"guess")
    assert "guess" not in str(caught.value)
    for near in (b"", SECRET[:-1].encode(), (SECRET + "x").encode(), b"\x00" * len(SECRET)):
        assert not restriction.credential.matches(near)


def test_hostile_presented_values_are_refused_cheaply() -> None:
    """A megabyte, NUL, CR/LF and 10,000 distinct values are each just not the credential."""
    credential = Credential(SECRET)
    assert not credential.matches(b"x" * (1 << 20))
    assert not credential.matches(SECRET.encode() + b"\r\n")
    assert not credential.matches(SECRET.encode() + b"\x00")
    assert not any(credential.matches(f"{SECRET}{i}".encode()) for i in range(10_000))


def test_a_credential_file_is_reread_when_replaced(tmp_path: Path) -> None:
    """@PATH: the stripped text of the file, re-read once it is replaced (as a rotated secret),
    looked at once per recheck interval."""
    token = tmp_path / "token"
    token.write_text("first\n")
    now = [0.0]
    credential = Credential.parse(f"@{token}", recheck_interval_s=1.0, clock=lambda: now[0])
    assert credential.matches(b"first")
    replacement = tmp_path / "token.new"
    replacement.write_text("second\n")
    os.replace(replacement, token)  # the atomic swap Kubernetes and most tools make
    now[0] = 0.999
    assert credential.matches(b"first")  # not looked at again within the interval
    now[0] = 1.0
    assert credential.matches(b"second")
    assert not credential.matches(b"first")


def test_a_credential_file_rewritten_in_place_is_reread(tmp_path: Path) -> None:
    """A file rewritten in place (same inode, same size) is re-read too: its ctime moved."""
    token = tmp_path / "token"
    token.write_text("aaaa")
    credential = Credential.parse(f"@{token}", recheck_interval_s=0.0)
    assert credential.matches(b"aaaa")
    before = os.stat(token)
    token.write_text("bbbb")
    # Timestamps are coarse (a few ms): move them on by hand rather than sleep and hope.
    os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert credential.matches(b"bbbb")


def test_a_missing_or_empty_file_matches_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A credential file removed or emptied fails closed, logged without the secret."""
    token = tmp_path / "token"
    token.write_text(SECRET)
    credential = Credential.parse(f"@{token}", recheck_interval_s=0.0)
    assert credential.matches(SECRET.encode())
    with caplog.at_level(logging.WARNING):
        token.unlink()
        assert not credential.matches(SECRET.encode())
        assert not credential.matches(b"")
        token.write_text("  \n")
        assert not credential.matches(b"")
        assert not credential.matches(SECRET.encode())
    assert "cannot be read" in caplog.text
    assert "is empty" in caplog.text
    assert SECRET not in caplog.text
    token.write_text(SECRET + "2")
    assert credential.matches(f"{SECRET}2".encode())


def test_a_file_unreadable_at_start_is_an_error(tmp_path: Path) -> None:
    """@PATH naming no file fails at parse time, naming the path (the operator hears it now)."""
    with pytest.raises(OSError, match="missing"):
        RestrictedApis.http([f"inference:key=@{tmp_path / 'missing'}"])
    with pytest.raises(ValueError, match="path"):
        Credential.parse("@")


def test_repr_never_shows_the_secret() -> None:
    """Neither a credential's nor a restriction's repr shows its value."""
    restriction = Restriction([ApiGroup.INFERENCE], "k", Credential(SECRET))
    assert SECRET not in repr(restriction)
    assert SECRET not in repr(RestrictedApis([restriction]))


def test_by_api_lists_only_restricted_groups() -> None:
    """by_api maps each API whose group is restricted to that group and its restriction."""
    restricted = RestrictedApis.http(["statistics:k=v"])
    table = {"a": ApiGroup.STATISTICS, "b": ApiGroup.HEALTH}
    assert list(restricted.by_api(table)) == ["a"]
    assert not RestrictedApis()
    assert restricted
