"""The console's request for a fresh Flight Recorder dump is written into the job's own
directory: never through a link the job planted, never into a file that is not the
directory owner's (the hook's answers themselves are checked on a real Slurm cluster,
jobs/tests/test_slurm_backend.py)."""

import os
import pwd

import pytest

from jobs.backends import fr_files


def fr_dir(tmp_path):
    d = tmp_path / "c4d"
    d.mkdir()
    fr_files.create_request(str(d))
    return d


def test_a_request_is_written_in_place_and_an_answer_with_the_token_counts(tmp_path):
    d = fr_dir(tmp_path)
    inode = (d / "request").stat().st_ino
    (d / "answer_3").write_text("t1\n")  # what fr_boot writes after its fresh dump
    (d / "answer_4").write_text("older\n")
    assert fr_files.ask_for_dumps({"worker-0": str(d)}, timeout=0, token="t1") == {"worker-0": [3]}
    assert (d / "request").read_text() == "t1\n" and (d / "request").stat().st_ino == inode
    assert fr_files.ask_for_dumps({"worker-0": str(d)}, timeout=0.2, poll=0.05, token="t2") == {"worker-0": []}


def test_a_request_file_the_job_replaced_by_a_link_is_left_alone(tmp_path):
    d = fr_dir(tmp_path)
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (d / "request").unlink()
    (d / "request").symlink_to(target)
    assert fr_files.ask_for_dumps({"worker-0": str(d)}, timeout=0, token="t1") == {"worker-0": []}
    assert target.read_text() == "keep me\n"
    os.symlink(d, tmp_path / "linked")  # the directory itself a link: not followed either
    (d / "request").unlink()
    fr_files.create_request(str(d))
    assert not fr_files._write_request(str(tmp_path / "linked"), "t1")
    assert (d / "request").read_text() == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another user (CI runs as root)")
def test_a_request_file_that_is_not_the_directory_owners_is_left_alone(tmp_path):
    """A hard link the job made to a file of someone else's: the console (root) would write it."""
    d = fr_dir(tmp_path)
    nobody = pwd.getpwnam("nobody")
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    assert (d / "request").stat().st_uid == 0  # root's file in nobody's directory
    assert not fr_files._write_request(str(d), "t1")
    assert (d / "request").read_text() == ""
    os.chown(d / "request", nobody.pw_uid, nobody.pw_gid)
    assert fr_files._write_request(str(d), "t1")
