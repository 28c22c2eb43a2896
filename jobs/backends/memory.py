"""An in-memory backend for tests and benchmarks: no processes, state set directly.

Like Django's locmem e-mail backend: it does what the contract says with plain
dicts, and lets a test drive every instance by hand:

    backend = MemoryBackend()
    handle = backend.launch(spec)                # every instance RUNNING
    backend.write_log(handle, "worker-1", b"NCCL error: unhandled system error\\n")
    backend.finish(handle, "worker-1", exit_code=1)
    backend.poll(handle)                         # worker-1 FAILED, exit code 1

poll() is a dict lookup and a list copy, so a monitor benchmark can poll
thousands of jobs per tick. Calls are recorded (launched, stopped, restarted) for
assertions. `launch_error` makes the next launch raise (to test retries).
"""

from __future__ import annotations

import dataclasses
import time

from .base import AttemptLaunch, Backend, BackendError, InstanceState, PolledInstance, Node


class _Attempt:
    __slots__ = ("spec", "handle", "statuses", "logs", "pids")

    def __init__(self, spec):
        self.spec = spec
        self.handle: dict = {}
        self.statuses: dict[str, PolledInstance] = {}
        self.logs: dict[str, bytearray] = {}
        self.pids: dict[str, list[int]] = {}


class MemoryBackend(Backend):
    can_dump_stacks = False
    can_isolate_nodes = True
    can_run_replica_groups = True  # the groups' instances, without a Lighthouse: a test double

    def __init__(self, name: str = "memory", *, nodes: list[dict] | None = None, initial_state: str = "running"):
        super().__init__(name)
        self.nodes = [dict(n) for n in (nodes or [{"name": "mem-0", "slots": 8}])]
        try:
            self.initial_state = InstanceState(initial_state)
        except ValueError:
            accepted = ", ".join(s.value for s in InstanceState)
            raise BackendError(f"memory backend option 'initial_state': {initial_state!r} is not one of {accepted}")
        self.isolated: dict[str, str] = {}
        self.attempts: dict[tuple[str, int], _Attempt] = {}
        self.launched: list[AttemptLaunch] = []
        self.stopped: list[tuple[str, int, str | None, float | None]] = []  # (job, attempt, instance or None, grace)
        self.restarted: list[tuple[str, int, str]] = []
        self.launch_error: BackendError | None = None

    def reset(self) -> None:
        # Through the class: a subclass's own __init__ (extra state) runs again too.
        type(self).__init__(self, self.name, nodes=self.nodes, initial_state=self.initial_state.value)

    # -- helpers for tests ----------------------------------------------------
    def _attempt(self, handle) -> _Attempt:
        try:
            return self.attempts[(handle["job_id"], handle["attempt"])]
        except KeyError:
            raise BackendError(f"no attempt {handle.get('attempt')} of job {handle.get('job_id')} in this backend")

    def _get(self, handle, name) -> tuple[_Attempt, PolledInstance]:
        att = self._attempt(handle)
        try:
            return att, att.statuses[name]
        except KeyError:
            raise BackendError(f"instance {name!r} is not part of this attempt (known: {', '.join(att.statuses)})")

    def set_instance(self, handle: dict, name: str, **changes) -> PolledInstance:
        """Change any PolledInstance field of one instance (state=..., exit_code=..., node=...)."""
        att, status = self._get(handle, name)
        if "state" in changes:
            changes["state"] = InstanceState(changes["state"])
        status = dataclasses.replace(status, **changes)
        att.statuses[name] = status
        return status

    def finish(
        self,
        handle: dict,
        name: str,
        exit_code: int | None = 0,
        signal: int | None = None,
        reason: str = "",
        now: float | None = None,
    ) -> PolledInstance:
        """End an instance as a process would: SUCCEEDED on code 0, FAILED otherwise."""
        state = InstanceState.SUCCEEDED if exit_code == 0 and signal is None else InstanceState.FAILED
        return self.set_instance(
            handle,
            name,
            state=state,
            exit_code=exit_code,
            signal=signal,
            reason=reason,
            exited_at=time.time() if now is None else now,
        )

    def write_log(self, handle: dict, name: str, data: bytes | str, now: float | None = None) -> None:
        att, _ = self._get(handle, name)
        att.logs[name] += data.encode() if isinstance(data, str) else data
        self.set_instance(handle, name, last_output_at=time.time() if now is None else now)

    def set_pids(self, handle: dict, name: str, pids: list[int]) -> None:
        att, _ = self._get(handle, name)
        att.pids[name] = list(pids)

    # -- the contract ---------------------------------------------------------------
    def launch(self, spec: AttemptLaunch) -> dict:
        if self.launch_error is not None:
            error, self.launch_error = self.launch_error, None
            raise error
        key = (str(spec.job_id), spec.attempt)
        if key in self.attempts:
            return self.attempts[key].handle
        usable = [n for n in self.nodes if n["name"] not in self.isolated and n["name"] not in spec.avoid_nodes]
        if not usable:
            raise BackendError(f"no schedulable node for job {spec.job_id}")
        now = time.time()
        att = _Attempt(spec)
        instances = []
        for i, inst in enumerate(sorted(spec.instances, key=lambda x: x.rank)):
            node = usable[i % len(usable)]["name"]
            att.statuses[inst.name] = PolledInstance(
                name=inst.name,
                role=inst.role,
                index=inst.index,
                state=self.initial_state,
                started_at=now if self.initial_state == InstanceState.RUNNING else None,
                last_output_at=None,
                node=node,
            )
            att.logs[inst.name] = bytearray()
            instances.append(
                {"name": inst.name, "role": inst.role, "index": inst.index, "rank": inst.rank, "node": node}
            )
        handle = {
            "backend": self.name,
            "job_id": key[0],
            "attempt": spec.attempt,
            "job_type": spec.job_type,
            "instances": instances,
        }
        att.handle = handle
        self.attempts[key] = att
        self.launched.append(spec)
        return handle

    def poll(self, handle: dict) -> list[PolledInstance]:
        return list(self._attempt(handle).statuses.values())

    def _stop_one(self, att, name, now):
        status = att.statuses[name]
        if not status.state.finished:
            att.statuses[name] = dataclasses.replace(
                status, state=InstanceState.STOPPED, signal=15, exited_at=now, reason="stopped on request"
            )

    def stop(self, handle: dict, grace: float | None = None) -> None:
        att = self._attempt(handle)
        now = time.time()
        for name in att.statuses:
            self._stop_one(att, name, now)
        self.stopped.append((handle["job_id"], handle["attempt"], None, grace))

    def stop_instance(self, handle: dict, name: str, grace: float | None = None) -> None:
        att, _ = self._get(handle, name)
        self._stop_one(att, name, time.time())
        self.stopped.append((handle["job_id"], handle["attempt"], name, grace))

    def restart_instance(self, handle: dict, name: str) -> dict:
        att, status = self._get(handle, name)
        att.statuses[name] = PolledInstance(
            name=status.name,
            role=status.role,
            index=status.index,
            state=InstanceState.RUNNING,
            started_at=time.time(),
            node=status.node,
        )
        att.logs[name] += f"===== vigil: {name} restarted =====\n".encode()
        self.restarted.append((handle["job_id"], handle["attempt"], name))
        return handle

    def read_log(self, handle: dict, name: str, offset: int = 0, limit: int | None = None) -> bytes:
        att, _ = self._get(handle, name)
        log = att.logs[name]
        return bytes(log[offset:] if limit is None else log[offset : offset + limit])

    def tail_log(self, handle: dict, name: str, nbytes: int) -> bytes:
        att, _ = self._get(handle, name)
        log = att.logs[name]
        return bytes(log[max(0, len(log) - nbytes) :])

    def handle_for(self, job_id, attempt: int) -> dict:
        try:
            return self.attempts[(str(job_id), attempt)].handle
        except KeyError:
            raise BackendError(f"no attempt {attempt} of job {job_id} in this backend") from None

    def stop_everything(self, grace: float = 0.5) -> list[int]:
        for att in self.attempts.values():
            if any(not s.state.finished for s in att.statuses.values()):
                self.stop(att.handle, grace)
        return []  # no processes

    def list_nodes(self) -> list[Node]:
        return [
            Node(n["name"], n["slots"], n["name"] not in self.isolated, self.isolated.get(n["name"], ""))
            for n in self.nodes
        ]

    def isolate_node(self, name: str, reason: str) -> None:
        if name not in {n["name"] for n in self.nodes}:
            raise BackendError(f"node: {name!r} is not a node of this backend")
        self.isolated[name] = reason or "isolated"

    def restore_node(self, name: str) -> None:
        self.isolated.pop(name, None)

    def pids(self, handle: dict, name: str) -> list[int]:
        att, _ = self._get(handle, name)
        return list(att.pids.get(name, ()))
