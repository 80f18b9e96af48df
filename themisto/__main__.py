import sys

from themisto.cli import main

sys.exit(main())
