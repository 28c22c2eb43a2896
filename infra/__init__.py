"""The plumbing every app shares: one Redis client, calls to Redis that must not
hold anyone up, heartbeats and readiness, metric counters.

It sits below the apps (jobs, monitoring, notifications) and the site shell
(console), and imports none of them (lint-imports checks it), so any of them may
use it without an import cycle."""
