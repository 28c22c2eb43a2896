"""Replica groups (issue 30): a job's instances split into N torchft replica groups.

The instances are split in rank order into N equal groups: with 6 instances and
``--replica-groups=3``, ranks 0-1 are group 0, 2-3 group 1, 4-5 group 2. Each group is an
ordinary data-parallel job of its own (its own rendezvous, ranks 0..size-1 within it); the
Lighthouse keeps the quorum of the groups. A failed group is restarted alone, and what one
group does wrong every group would do (they run the same code on the same kind of data), so
the repeated-failure rules count a failure at one position of one group as a failure at
that position of every group (``counterparts``).

Pure: no Django, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupLayout", "layout_error", "kept_training", "PYTORCH_JOB"]

PYTORCH_JOB = "PyTorchJob"


def layout_error(groups: int, instances: int, job_type: str) -> str | None:
    """Why ``--replica-groups=groups`` cannot split this job, or None when it can (0: off)."""
    if groups == 0:
        return None
    if job_type != PYTORCH_JOB:
        return f"--replica-groups: replica groups run on torchft, for a PyTorchJob only (this job is a {job_type})"
    if instances % groups:
        return (
            f"--replica-groups: {groups} does not divide the job's {instances} instance"
            f"{'s' if instances != 1 else ''}; every group needs the same number of instances "
            f"(use a divisor of {instances} from 2 up, or change the replicas)"
        )
    return None


@dataclass(frozen=True)
class GroupLayout:
    """How `world` ranks split into `groups` groups (`groups` divides `world`)."""

    groups: int
    world: int

    def __post_init__(self) -> None:
        if self.groups < 2 or self.world < self.groups or self.world % self.groups:
            raise ValueError(f"{self.groups} replica groups cannot split {self.world} ranks evenly")

    @property
    def size(self) -> int:
        return self.world // self.groups

    def group_of(self, rank: int) -> int:
        self._check(rank)
        return rank // self.size

    def rank_in_group(self, rank: int) -> int:
        self._check(rank)
        return rank % self.size

    def members(self, group: int) -> range:
        """The global ranks of one group."""
        if not 0 <= group < self.groups:
            raise ValueError(f"group {group} is not one of 0..{self.groups - 1}")
        return range(group * self.size, (group + 1) * self.size)

    def counterparts(self, rank: int) -> tuple[int, ...]:
        """The ranks at the same position as `rank` in the other groups."""
        position = self.rank_in_group(rank)
        return tuple(g * self.size + position for g in range(self.groups) if g != self.group_of(rank))

    def _check(self, rank: int) -> None:
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} is not one of 0..{self.world - 1}")


def kept_training(groups: int, restarted: int) -> str:
    """ "groups 0 and 2" for the groups other than `restarted`."""
    others = [str(g) for g in range(groups) if g != restarted]
    if len(others) == 1:
        return f"group {others[0]}"
    return "groups " + ", ".join(others[:-1]) + " and " + others[-1]
