# Seed 000, "Konfigurasikan notifikasi toleransi kesalahan": the custom message
# example with only the import line changed. The seed leaves `loss`, `Nan` and
# `rank` to the reader's training code; the one marked line stands in for it.
from vigil import job_monitor as jm

job_monitor_client = jm.Monitor(config=jm.PyTorchConfig())

...
loss, Nan, rank = "nan", "nan", 0  # stands in for the seed's "..." (the training code)

if loss == Nan and rank == 0:
    st = job_monitor_client.send_custom_message(content="The training loss for the job is NaN.")
    if not st.ok():
        print("failed to send message, error %s" % st.to_string())
