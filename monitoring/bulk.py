"""One UPDATE of many job rows, each row its own value and its own compare-and-set, for
a sweep's chunk (schedule.store_many, MonitorState.save_many). Plain SQL, a CASE and a
row-value IN that SQLite and PostgreSQL both take: the ORM's Case/When and OR of Q
objects cost more CPU to build than a tick (profiled), and on PostgreSQL one statement
is one commit instead of one per job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from jobs.models import Job


def update_jobs(
    column: str,
    values: Sequence[tuple[int, Any]],
    match: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    also: str = "",
    where: dict[str, Any] | None = None,
    returning: bool = False,
) -> int | set[int]:
    """SET `column` to each job id's value (already adapted for the database) on the
    rows whose `match` columns equal one of `rows` (id first) and whose `where` columns
    equal theirs; `also` is more of the SET clause ("col = col + 1"). The count of rows
    written, or with `returning` their ids (PostgreSQL, SQLite 3.35+)."""
    q = connection.ops.quote_name
    when = " ".join(["WHEN %s THEN %s"] * len(values))
    row = "(" + ", ".join(["%s"] * len(match)) + ")"
    conditions = "".join(f"{q(name)} = %s AND " for name in where or {})
    sql = (
        f"UPDATE {q(Job._meta.db_table)} SET {q(column)} = CASE {q('id')} {when} END{', ' + also if also else ''} "
        f"WHERE {conditions}({', '.join(q(name) for name in match)}) IN (VALUES {', '.join([row] * len(rows))})"
    )
    if returning:
        sql += f" RETURNING {q('id')}"
    params = [p for pair in values for p in pair] + list((where or {}).values()) + [p for r in rows for p in r]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {r[0] for r in cursor.fetchall()} if returning else cursor.rowcount
