import sys

from kernelblaster.cli import main

sys.exit(main())
