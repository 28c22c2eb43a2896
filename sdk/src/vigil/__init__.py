"""Vigil SDK: what training code uses to talk to the Vigil console that runs its job.

from vigil import job_monitor as jm      # the managed platform's job_monitor shape
import vigil.c4d                          # C4D collective instrumentation
"""

from vigil._client import Status, StatusCode
from vigil.job_monitor import report_progress

__version__ = "0.1.0"
__all__ = ["Status", "StatusCode", "report_progress", "__version__"]
