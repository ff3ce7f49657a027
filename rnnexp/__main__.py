from rnnexp.app.commands import main

main()
