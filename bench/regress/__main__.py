import sys

from bench.regress.gate import main

sys.exit(main())
