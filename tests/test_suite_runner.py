"""`make test` runs the suite as two sessions at once (testsupport/suite.py): every test
directory is in exactly one shard, and the shards never share a database."""

from testsupport import suite


def test_every_testpath_is_in_exactly_one_shard_and_the_monitor_and_core_go_first():
    paths = suite.testpaths()
    shards = suite.shards(paths)
    assert len(shards) == 2 and all(shards)
    first, second = shards
    assert sorted(p for p in first + second if p in paths) == sorted(paths)
    assert {"monitoring", "core"} <= set(first)
    # A file taken from a directory of the second shard runs in the first only.
    moved = [p for p in first if p not in paths]
    assert moved and all((suite.REPO / p).is_file() for p in moved)
    assert [a for a in second if a.startswith("--ignore=")] == [f"--ignore={p}" for p in moved]


def test_a_new_directory_goes_to_the_second_shard():
    assert suite.shards(["core", "newthing", "monitoring"]) == [["core", "monitoring"], ["newthing"]]


def test_a_file_of_first_under_a_second_shard_directory_moves_and_is_ignored_there():
    assert suite.shards(["core", "tests"]) == [
        ["core", "tests/test_chaos.py"],
        ["tests", "--ignore=tests/test_chaos.py"],
    ]


def test_postgresql_gets_a_database_per_shard_and_sqlite_is_left_alone():
    assert (
        suite.database_url_for("postgres://postgres@127.0.0.1:5432/vigil", 2)
        == "postgres://postgres@127.0.0.1:5432/vigil_s2"
    )
    assert (
        suite.database_url_for("postgres://u:p@db:5432/vigil?sslmode=require", 1)
        == "postgres://u:p@db:5432/vigil_s1?sslmode=require"
    )
    assert suite.database_url_for("", 1) == ""
    assert suite.database_url_for("sqlite:////tmp/x.sqlite3", 1) == "sqlite:////tmp/x.sqlite3"


def test_arguments_that_name_tests_run_as_one_session():
    assert suite.names_tests(["-q", "core/tests/test_flags.py::test_x"])
    assert suite.names_tests(["jobs"])
    assert not suite.names_tests(["-q", "-k", "flags", "--durations=20"])
