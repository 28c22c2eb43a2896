"""The Channels layer of the console: channels_redis that degrades instead of failing.

With the stock layer a Redis outage ends every WebSocket (a consumer's receive
raises) and refuses every new one (group_add raises in connect), although what a
job page streams most, its logs, is read from files. Here, while Redis is away:

- group_add, group_discard, send and group_send give up after OP_TIMEOUT seconds
  or on a connection error, and are logged, never raised;
- a consumer's receive waits and tries again instead of raising, and re-joins the
  consumer's groups once Redis answers;
- `delayed` says that live events may be late, so a consumer can tell its page
  (the job page shows it and reads the events it missed from the database).
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels_redis.core import RedisChannelLayer
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

OP_TIMEOUT = 1.0  # seconds a group or send operation may take before it is given up
RETRY_EVERY = 1.0  # seconds between receive attempts while Redis is away
TROUBLE = (RedisError, OSError, asyncio.TimeoutError)


class ResilientRedisChannelLayer(RedisChannelLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.groups_of: dict[str, set[str]] = {}  # channel -> groups it asked to be in
        self.rejoin: set[str] = set()  # channels whose group_add did not get through
        self.failed_at = 0.0  # when an operation last failed (monotonic)

    @property
    def delayed(self) -> bool:
        """Live messages may be late or lost: Redis failed an operation in the last few seconds."""
        return time.monotonic() - self.failed_at < 3 * RETRY_EVERY

    async def probe(self) -> bool:
        """Does Redis answer a PING within OP_TIMEOUT? (A stalled Redis blocks a receive
        silently, so a consumer asks now and then.)"""
        return await self._bounded("ping", self.connection(0).ping())

    async def _bounded(self, what: str, coro) -> bool:
        try:
            await asyncio.wait_for(coro, OP_TIMEOUT)
            return True
        except TROUBLE as exc:
            self.failed_at = time.monotonic()
            log.warning("channel layer %s failed (Redis away?): %r", what, exc)
            return False

    async def group_add(self, group, channel):
        self.groups_of.setdefault(channel, set()).add(group)
        if not await self._bounded("group_add", super().group_add(group, channel)):
            self.rejoin.add(channel)

    async def group_discard(self, group, channel):
        groups = self.groups_of.get(channel)
        if groups is not None:
            groups.discard(group)
            if not groups:
                del self.groups_of[channel]
                self.rejoin.discard(channel)
        await self._bounded("group_discard", super().group_discard(group, channel))

    async def group_send(self, group, message):
        await self._bounded("group_send", super().group_send(group, message))

    async def send(self, channel, message):
        await self._bounded("send", super().send(channel, message))

    async def receive(self, channel):
        while True:
            if channel in self.rejoin:
                await self._rejoin(channel)
            try:
                return await super().receive(channel)
            except TROUBLE as exc:
                self.failed_at = time.monotonic()
                self.rejoin.add(channel)  # group memberships expire while we cannot renew them
                log.warning("channel layer receive failed (Redis away?), retrying: %r", exc)
                await asyncio.sleep(RETRY_EVERY)

    async def _rejoin(self, channel):
        for group in list(self.groups_of.get(channel, ())):
            if not await self._bounded("group_add", super().group_add(group, channel)):
                return
        self.rejoin.discard(channel)
