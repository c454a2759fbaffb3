from memlens.cli.main import main

main()
