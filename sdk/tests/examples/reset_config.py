# Seed 000, "Konfigurasikan pendeteksian hang pekerjaan bertahap": reset_config in the
# three forms the seed shows (a dict, keywords, ** of a dict). jm_config_params is
# the one the seed's staged example builds.
from vigil import job_monitor as jm

jm_config_params = {
    "job_hang_interval": 1800  # Deteksi global 30 menit.
}
jm_config = jm.PyTorchConfig(**jm_config_params)
monitor = jm.Monitor(config=jm_config)

monitor.reset_config(jm_config_params)

# Contoh:
monitor.reset_config(job_hang_interval=10)
#     atau
config_params = {
    "job_hang_interval": 10,
}
monitor.reset_config(**config_params)
