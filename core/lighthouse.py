"""What a torchft Lighthouse says about a job's replica groups (issue 30).

The Lighthouse's ``/status`` answers an HTML fragment, not JSON (torchft 0.2.0): the current
quorum id, the previous quorum's members with their step, manager address and world size,
and one line per heartbeating replica with how long ago it was seen. ``parse_status`` reads
those facts and nothing else, defensively: a field it cannot find is None or empty, never an
exception, since the fragment is a template of a third-party server and may change. Vigil
never sends a user to the Lighthouse's own dashboard (it loads scripts from outside and has
kill buttons); the job page shows what this module extracts.

A replica id is ``<the id the group gave>:<uuid>``; Vigil's example names its groups
``vigil_group_<n>``, and the group number is the prefix's trailing digits (as torchft's own
``extract_trailing_digits`` reads it), None when there are none.

``rejoin_overdue`` is the rule for a group that never comes back: restarted more than
``limit`` seconds ago and still not a member of the quorum.

Pure: no Django, no network, no clock (``now`` is given).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "QUORUM_EVENT",
    "Member",
    "Heartbeat",
    "LighthouseStatus",
    "parse_status",
    "group_of_replica",
    "rejoin_overdue",
]

QUORUM_EVENT = "quorum"  # the payload kind of the job event that records one quorum
MAX_STATUS_BYTES = 1 << 20  # a status page is ~1 KiB per member; more is not a Lighthouse's answer

_TAGS = re.compile(r"<[^>]*>")
_QUORUM_ID = re.compile(r"Current quorum_id:\s*(-?\d+)")
_PREVIOUS_ID = re.compile(r"Previous quorum id:\s*(-?\d+)")
_MEMBER = re.compile(r'<div class="member[^"]*">(.*?)</div>', re.S)
_BOLD = re.compile(r"<b>(.*?)</b>", re.S)
_STEP = re.compile(r"Step:\s*(\d+)")
_WORLD = re.compile(r"World size:\s*(\d+)")
_HEARTBEAT = re.compile(r'<li class="heartbeat\s*([^"]*)">(.*?)</li>', re.S)
_SEEN = re.compile(r"^(.*):\s*seen\s+([0-9.]+)(ms|s|µs|us|ns)?\s+ago$", re.S)
_NEXT = re.compile(r"Next quorum status:\s*([^\n<]*)")
_TRAILING_DIGITS = re.compile(r"(\d+)$")
_UNIT = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9, None: 1.0}


@dataclass(frozen=True)
class Member:
    replica_id: str
    group: int | None
    step: int | None
    world_size: int | None


@dataclass(frozen=True)
class Heartbeat:
    replica_id: str
    group: int | None
    seen_seconds_ago: float | None
    stale: bool  # the Lighthouse marks it "old": past its heartbeat timeout


@dataclass(frozen=True)
class LighthouseStatus:
    quorum_id: int | None
    members: tuple[Member, ...]  # of the last quorum formed
    heartbeats: tuple[Heartbeat, ...]
    next_quorum: str  # the Lighthouse's own sentence about the quorum it is forming

    @property
    def groups(self) -> tuple[int, ...]:
        """The groups in the quorum, in order (members without a group number left out)."""
        return tuple(sorted({m.group for m in self.members if m.group is not None}))

    def step_of(self, group: int) -> int | None:
        steps = [m.step for m in self.members if m.group == group and m.step is not None]
        return max(steps) if steps else None

    def recovering(self) -> tuple[int, ...]:
        """Groups alive (a fresh heartbeat) but not in the quorum: joining, healing from a peer."""
        alive = {h.group for h in self.heartbeats if h.group is not None and not h.stale}
        return tuple(sorted(alive - set(self.groups)))

    def to_dict(self) -> dict:
        return {
            "quorum_id": self.quorum_id,
            "groups": list(self.groups),
            "steps": {str(g): self.step_of(g) for g in self.groups},
            "recovering": list(self.recovering()),
            "next_quorum": self.next_quorum,
        }


def group_of_replica(replica_id: str) -> int | None:
    prefix = replica_id.split(":", 1)[0]
    m = _TRAILING_DIGITS.search(prefix)
    return int(m.group(1)) if m else None


def _text(fragment: str) -> str:
    return html.unescape(_TAGS.sub(" ", fragment))


def _int(pattern: re.Pattern, text: str) -> int | None:
    m = pattern.search(text)
    return int(m.group(1)) if m else None


def parse_status(page: str | bytes) -> LighthouseStatus:
    """The facts of one /status answer; anything unrecognised is left out, never raised."""
    if isinstance(page, bytes):
        page = page[:MAX_STATUS_BYTES].decode("utf-8", "replace")
    page = page[:MAX_STATUS_BYTES] if isinstance(page, str) else ""
    quorum_id = _int(_QUORUM_ID, page)
    if quorum_id is None:
        quorum_id = _int(_PREVIOUS_ID, page)
    members = []
    for block in _MEMBER.findall(page):
        name = _BOLD.search(block)
        replica_id = _text(name.group(1)).strip() if name else ""
        if not replica_id:
            continue
        text = _text(block)
        members.append(Member(replica_id, group_of_replica(replica_id), _int(_STEP, text), _int(_WORLD, text)))
    heartbeats = []
    for classes, body in _HEARTBEAT.findall(page):
        m = _SEEN.match(" ".join(_text(body).split()))
        if not m:
            continue
        replica_id = m.group(1).strip()
        try:
            age: float | None = float(m.group(2)) * _UNIT.get(m.group(3), 1.0)
        except ValueError:
            age = None
        heartbeats.append(Heartbeat(replica_id, group_of_replica(replica_id), age, "old" in classes.split()))
    nxt = _NEXT.search(page)
    return LighthouseStatus(quorum_id, tuple(members), tuple(heartbeats), " ".join(nxt.group(1).split()) if nxt else "")


def rejoin_overdue(
    restarted_at: Mapping[int, float], status: LighthouseStatus, now: float, limit: float
) -> tuple[tuple[int, float], ...]:
    """(group, seconds since its restart) for each restarted group not back in the quorum
    after `limit` seconds; a group restarted again later counts from its last restart."""
    back = set(status.groups)
    return tuple(
        (group, now - at) for group, at in sorted(restarted_at.items()) if group not in back and now - at > limit
    )
