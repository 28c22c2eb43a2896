# Seed 000, "Konfigurasikan kata kunci toleransi kesalahan kustom" (PyTorch), verbatim
# but for the import line.
from vigil import job_monitor as jm

jm_config_params = {}
jm_config = jm.PyTorchConfig(**jm_config_params)
monitor = jm.Monitor(config=jm_config)
monitor.set_retryable_errors(["connect timeout", "error_yyy", "error_zzz"])
