from rnnexp.cli import main
from rnnexp.quick_exit import exit_now

try:
    main()
except SystemExit as done:
    exit_now(done.code)
