"""Put on PYTHONPATH of a service process by tests/operators/test_tracing.py: every time the
process imports an ``opentelemetry`` module, a line ``<pid> <module>`` is appended to the file
named by ``SJ_TEST_IMPORT_PROBE`` (the test reads it). Python imports ``sitecustomize`` at start-up,
before anything of the service, and forked children (gunicorn's workers) keep the hook."""

import os
import sys

_path = os.environ.get("SJ_TEST_IMPORT_PROBE")


class _Probe:
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if _path and name.split(".")[0] == "opentelemetry":
            fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{os.getpid()} {name}\n".encode())
            finally:
                os.close(fd)
        return None  # only watching: the normal finders import it


if _path:
    sys.meta_path.insert(0, _Probe())
