from ouroboros.cli import main

main()
