"""Which commands start warm (core.warmstart), and which environments a parked interpreter can take."""

import pytest

from core.warmstart import EntryKind, WarmEntry, startup_env_difference, warm_entry


@pytest.mark.parametrize(
    ("command", "entry"),
    [
        ("python train.py", WarmEntry("python", EntryKind.SCRIPT, "train.py", ())),
        (
            "python3 examples/ddp.py --epochs 3 --lr=0.1",
            WarmEntry("python3", EntryKind.SCRIPT, "examples/ddp.py", ("--epochs", "3", "--lr=0.1")),
        ),
        (
            "  exec /opt/venv/bin/python3.11 -u 'my dir/t.py' 'a b'  ",
            WarmEntry("/opt/venv/bin/python3.11", EntryKind.SCRIPT, "my dir/t.py", ("a b",)),
        ),
        ("python -m pkg.train --x 1", WarmEntry("python", EntryKind.MODULE, "pkg.train", ("--x", "1"))),
        ("python -mpkg.train", WarmEntry("python", EntryKind.MODULE, "pkg.train", ())),
        ("python -u -m torch.distributed.run", WarmEntry("python", EntryKind.MODULE, "torch.distributed.run", ())),
    ],
)
def test_a_python_entry_point_starts_warm(command, entry):
    decision = warm_entry(command)
    assert decision.warm and decision.reason == ""
    assert decision.entry == entry


def test_the_argv_is_the_one_a_cold_interpreter_sets():
    assert warm_entry("python t.py a b").entry.argv == ["t.py", "a", "b"]
    assert warm_entry("python -m m a").entry.argv == ["-m", "a"]  # runpy puts the module's file in argv[0]


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("", "empty"),
        ("exec", "empty"),
        ("bash run.sh", "'bash' is not a Python interpreter"),
        ("torchrun --nproc-per-node 2 train.py", "'torchrun' is not a Python interpreter"),
        ("pythonista t.py", "is not a Python interpreter"),
        ("python", "interactive"),
        ("python -u", "interactive"),
        ("python -c pass", "option '-c'"),
        ("python -O t.py", "option '-O'"),
        ("python -X importtime t.py", "option '-X'"),
        ("python -m", "not a module name"),
        ("python -m 'a b'", "not a module name"),
        ("python t.py > out.log", "shell syntax"),
        ("python t.py && echo done", "shell syntax"),
        ("python t.py | tee x", "shell syntax"),
        ("python t.py $EPOCHS", "shell syntax"),
        ("python 'a$b.py'", "shell syntax"),  # harmless when quoted, but refused to stay simple
        ("python t*.py", "shell syntax"),
        ("python t.py\npython u.py", "shell syntax"),
        ("python t.py # note", "shell syntax"),
        ("python ~/t.py", "shell syntax"),
        ("OMP_NUM_THREADS=1 python t.py", "sets variables"),
        ("python 't.py", "cannot be split"),
    ],
)
def test_anything_else_starts_cold_and_says_why(command, says):
    decision = warm_entry(command)
    assert not decision.warm and decision.entry is None
    assert says in decision.reason


def test_startup_variables_that_differ_send_the_attempt_cold():
    parked = {"PATH": "/usr/bin", "PYTHONPATH": "/src", "LANG": "C.UTF-8", "RANK": "0", "HOME": "/h/1"}
    same_startup = dict(parked, RANK="1", MASTER_PORT="29500", HOME="/h/2", VIGIL_ATTEMPT="2")
    assert startup_env_difference(parked, same_startup) == ""
    assert "PYTHONPATH differs" in startup_env_difference(parked, dict(parked, PYTHONPATH="/other"))
    assert "LC_ALL differs" in startup_env_difference(parked, dict(parked, LC_ALL="C"))
    assert "OMP_NUM_THREADS differs" in startup_env_difference(parked, dict(parked, OMP_NUM_THREADS="4"))
    assert "LANG differs" in startup_env_difference(parked, {k: v for k, v in parked.items() if k != "LANG"})
    assert "PATH differs" in startup_env_difference(parked, dict(parked, PATH="/bin"))
