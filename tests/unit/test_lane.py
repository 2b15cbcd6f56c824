"""The box's lane for long texts: its places are shared by processes, and freed by dying ones."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from memsvc.embeddings.lane import Lane
from memsvc.embeddings.lane import long_text_lane
from memsvc.errors import ConfigError

_fork = multiprocessing.get_context("fork")


def _hold(directory: str, at_once: int, entered, leave, die: bool = False) -> None:
    """In another process: take a place in the lane, say so, and leave when told (or die)."""
    lane = Lane(directory, at_once)
    with lane.turn():
        entered.set()
        leave.wait(30)
        if die:
            os._exit(0)  # killed in its turn: the place is freed with the process


def _other_process(directory: str, at_once: int, *, die: bool = False):
    entered, leave = _fork.Event(), _fork.Event()
    process = _fork.Process(target=_hold, args=(directory, at_once, entered, leave, die))
    process.start()
    assert entered.wait(30)
    return process, leave


def _turn_in_thread(lane: Lane) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """This process's turn, taken in a thread: (entered, leave, thread)."""
    entered, leave = threading.Event(), threading.Event()

    def run():
        with lane.turn():
            entered.set()
            leave.wait(30)

    thread = threading.Thread(target=run)
    thread.start()
    return entered, leave, thread


def test_a_place_held_by_another_process_makes_a_long_text_here_wait(tmp_path):
    directory = str(tmp_path / "lane")
    process, leave = _other_process(directory, 1)
    lane = Lane(directory, 1)
    entered, done, thread = _turn_in_thread(lane)
    try:
        # Waiting: the other process holds the only place.
        assert not entered.wait(0.5)
        leave.set()
        process.join(30)
        assert entered.wait(30)
    finally:
        leave.set()
        done.set()
        thread.join(30)


def test_two_places_take_two_processes_and_a_third_waits(tmp_path):
    directory = str(tmp_path / "lane")
    first, leave_first = _other_process(directory, 2)
    second, leave_second = _other_process(directory, 2)
    lane = Lane(directory, 2)
    entered, done, thread = _turn_in_thread(lane)
    try:
        assert not entered.wait(0.5)
        leave_second.set()
        second.join(30)
        assert entered.wait(30)  # the place the second left
    finally:
        leave_first.set()
        leave_second.set()
        done.set()
        first.join(30)
        thread.join(30)


def test_a_process_that_dies_in_its_turn_frees_its_place(tmp_path):
    directory = str(tmp_path / "lane")
    process, leave = _other_process(directory, 1, die=True)
    lane = Lane(directory, 1)
    entered, done, thread = _turn_in_thread(lane)
    try:
        assert not entered.wait(0.5)
        leave.set()  # it exits without leaving the lane
        process.join(30)
        assert process.exitcode == 0
        assert entered.wait(30)
    finally:
        done.set()
        thread.join(30)


def test_threads_of_one_process_take_the_lane_one_at_a_time(tmp_path):
    # Two places, but a process's threads hold one between them: a lock
    # file is held by an open file, which the threads of a process share.
    lane = Lane(str(tmp_path / "lane"), 2)
    first, leave_first, one = _turn_in_thread(lane)
    assert first.wait(30)
    second, leave_second, two = _turn_in_thread(lane)
    try:
        assert not second.wait(0.5)
        leave_first.set()
        assert second.wait(30)
    finally:
        leave_first.set()
        leave_second.set()
        one.join(30)
        two.join(30)


def test_the_lane_takes_its_places_and_folder_from_the_settings(tmp_path):
    lane = long_text_lane({"LIMITS_DIR": str(tmp_path / "limits"), "LONG_TEXTS_AT_ONCE": 3})
    assert lane.directory == str(tmp_path / "limits") and lane.at_once == 3
    halves = long_text_lane({"LIMITS_DIR": str(tmp_path / "limits"), "LONG_TEXTS_AT_ONCE": None})
    assert halves.at_once == max(1, (os.cpu_count() or 1) // 2)


def test_a_folder_others_can_use_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="MEMSVC_LIMITS_DIR"):
        long_text_lane({"LIMITS_DIR": str(shared), "LONG_TEXTS_AT_ONCE": 1})


def test_a_folder_removed_before_first_use_is_made_again(tmp_path):
    directory = tmp_path / "lanes"
    lane = Lane(str(directory), 1)
    directory.rmdir()  # a cleaned /dev/shm, or an earlier test's temporary folder
    with lane.turn():
        assert (directory / "long-texts-0.lock").exists()
    assert oct(directory.stat().st_mode & 0o777) == oct(0o700)
