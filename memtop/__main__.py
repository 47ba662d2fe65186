import sys

from memtop.cli import main

sys.exit(main())
