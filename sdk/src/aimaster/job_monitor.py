"""`aimaster.job_monitor` is `vigil.job_monitor`: this module replaces itself in
sys.modules with the real one, so `jm.Monitor is vigil.job_monitor.Monitor` and
the process-wide default monitor is shared by both names."""

import sys

from vigil import job_monitor as _real

sys.modules[__name__] = _real
