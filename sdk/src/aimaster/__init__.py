"""Compatibility alias: the managed platform's `aimaster` package name for Vigil's SDK.

    from aimaster import job_monitor as jm      # the seed's import, unchanged

`aimaster.job_monitor` IS `vigil.job_monitor` (the same module object, so one
process has one default Monitor whichever name the code imported). Nothing else
of the platform's `aimaster` wheel is provided. New code should import
`from vigil import job_monitor as jm`.
"""

from aimaster import job_monitor  # the alias module beside this file

__all__ = ["job_monitor"]
