# Seed 000, staged hang detection for PyTorch. The seed sketches hang_detect and
# reset_hang_detect and says "implement these two functions in the SDK; you only
# need to annotate your functions": here they come from the SDK. torch is left
# out so the example runs anywhere (the torch variant is in the C4D tests);
# train/test take the epoch the seed's loop passes them.
from vigil import job_monitor as jm

jm_config_params = {
    "job_hang_interval": 1800  # Deteksi global 30 menit.
}
jm_config = jm.PyTorchConfig(**jm_config_params)
monitor = jm.Monitor(config=jm_config)


# The seed's own helper, unchanged: it works against the SDK as written.
def reset_hang_detect(hang_seconds):
    jm_config_params = {"job_hang_interval": hang_seconds}
    monitor.reset_config(**jm_config_params)


hang_detect = jm.hang_detect


@hang_detect(180)  # Atur ulang pendeteksian hang menjadi 3 menit, hanya untuk cakupan fungsi ini.
def train(epoch): ...


@hang_detect(-1)  # Nonaktifkan sementara pendeteksian hang, hanya untuk cakupan fungsi ini.
def test(epoch): ...


for epoch in range(0, 2):
    train(epoch)
    test(epoch)

reset_hang_detect(600)
