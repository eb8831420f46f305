"""BasicAuth in-process: bcrypt off the loop, successful checks cached, failures not, unknown
users cost as much as known ones, a bound on waiting checks."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest

from specmon.web.config import PasswordHash
from specmon.web.security import AuthResult, BasicAuth
from tests.support.tls import bcrypt_hash


class CountingExecutor(concurrent.futures.ThreadPoolExecutor):
    """One worker; counts the bcrypt checks submitted; can be held to make checks wait."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0
        self.gate = threading.Event()
        self.gate.set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1

        def gated() -> Any:
            self.gate.wait(10)
            return fn(*args, **kwargs)

        return super().submit(gated)


def header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def executor() -> Any:
    with CountingExecutor() as pool:
        yield pool


def auth(executor: CountingExecutor, **kwargs: Any) -> BasicAuth:
    users = {
        b"prometheus": PasswordHash(bcrypt_hash("right")),
        "jürgen".encode(): PasswordHash(bcrypt_hash("pa:ss wörd")),
    }
    return BasicAuth(users, executor=executor, **kwargs)


def test_right_password_is_checked_once_then_cached(executor: CountingExecutor) -> None:
    async def main() -> None:
        a = auth(executor)
        assert await a.check(header("prometheus", "right")) is AuthResult.OK
        assert executor.submitted == 1
        for _ in range(5):
            assert await a.check(header("prometheus", "right")) is AuthResult.OK
        assert executor.submitted == 1
        # Non-ASCII user and a password with a colon and a space.
        assert await a.check(header("jürgen", "pa:ss wörd")) is AuthResult.OK

    asyncio.run(main())


def test_wrong_passwords_and_unknown_users_pay_bcrypt_every_time(
    executor: CountingExecutor,
) -> None:
    async def main() -> None:
        a = auth(executor, cache_size=1)
        assert await a.check(header("prometheus", "right")) is AuthResult.OK
        for i in range(3):
            assert await a.check(header("prometheus", f"wrong{i}")) is AuthResult.WRONG
            # unknown user: a dummy hash is checked, so the answer takes as long
            assert await a.check(header(f"nobody{i}", "right")) is AuthResult.WRONG
        assert executor.submitted == 7
        # The failures were not cached, so they did not evict the right password.
        assert await a.check(header("prometheus", "right")) is AuthResult.OK
        assert executor.submitted == 7
        # Another user's password is no good.
        assert await a.check(header("prometheus", "pa:ss wörd")) is AuthResult.WRONG

    asyncio.run(main())


def test_a_changed_hash_is_checked_again(executor: CountingExecutor) -> None:
    async def main() -> None:
        first = BasicAuth({b"u": PasswordHash(bcrypt_hash("one"))}, executor=executor)
        assert await first.check(header("u", "one")) is AuthResult.OK
        second = BasicAuth({b"u": PasswordHash(bcrypt_hash("two"))}, executor=executor)
        assert await second.check(header("u", "one")) is AuthResult.WRONG
        assert await second.check(header("u", "two")) is AuthResult.OK

    asyncio.run(main())


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "Bearer abc",
        "Basic",
        "Basic !!!not-base64!!!",
        "Basic " + base64.b64encode(b"no colon here").decode(),
        "Digest username=prometheus",
    ],
)
def test_malformed_headers_are_missing_credentials(
    executor: CountingExecutor, value: str | None
) -> None:
    assert asyncio.run(auth(executor).check(value)) is AuthResult.MISSING
    assert executor.submitted == 0


def test_scheme_is_case_insensitive_and_long_passwords_fail_fast(
    executor: CountingExecutor,
) -> None:
    async def main() -> None:
        a = auth(executor)
        lower = "basic " + base64.b64encode(b"prometheus:right").decode()
        assert await a.check(lower) is AuthResult.OK
        assert await a.check(header("prometheus", "x" * 73)) is AuthResult.WRONG
        assert executor.submitted == 1

    asyncio.run(main())


def test_too_many_waiting_checks_are_refused(executor: CountingExecutor) -> None:
    async def main() -> None:
        a = auth(executor, max_pending=2)
        executor.gate.clear()
        waiting = [
            asyncio.create_task(a.check(header("prometheus", f"guess{i}"))) for i in range(2)
        ]
        await asyncio.sleep(0.05)
        assert await a.check(header("prometheus", "right")) is AuthResult.BUSY
        executor.gate.set()
        assert [await t for t in waiting] == [AuthResult.WRONG, AuthResult.WRONG]
        assert await a.check(header("prometheus", "right")) is AuthResult.OK

    asyncio.run(main())


def test_the_hash_is_never_shown() -> None:
    hashed = bcrypt_hash("right")
    secret = PasswordHash(hashed)
    assert hashed not in repr(secret) and hashed not in str(secret)
    assert secret.cost == 4
