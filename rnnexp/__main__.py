from rnnexp.cli import exit_now, main

try:
    main()
except SystemExit as done:
    exit_now(done.code)
