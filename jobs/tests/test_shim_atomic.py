"""shim.write_json_atomic from several threads of one process at once (a stop request
and a sweep stopping the same instance): every write lands whole, none fails."""

import json
import threading

from jobs.backends.shim import write_json_atomic


def test_threads_of_one_process_write_the_same_file_without_taking_each_others_temp(tmp_path):
    path = str(tmp_path / "stop.json")
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(n: int) -> None:
        start.wait()
        try:
            for i in range(300):
                write_json_atomic(path, {"writer": n, "i": i})
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(open(path).read())["i"] == 299
    assert [p.name for p in tmp_path.iterdir()] == ["stop.json"], "no temporary file left behind"
