from rnnexp.app.cli import main
from rnnexp.app.quick_exit import exit_now

try:
    main()
except SystemExit as done:
    exit_now(done.code)
