from rnnexp.cli import main

main()
