import atexit
import os
import sys
import threading

from rnnexp.cli import main


def exit_now(code: object) -> None:
    """End the program as Python would — non-daemon threads joined, exit handlers run,
    output flushed — minus the interpreter's own teardown: freeing every module of torch,
    MLflow and pandas one by one took 1.3 s of a 7 s sweep on a 2-core machine."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


try:
    main()
except SystemExit as done:
    exit_now(done.code)
