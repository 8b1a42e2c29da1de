import sys

from headroom.cli import main

sys.exit(main())
