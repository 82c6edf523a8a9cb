import sys

from bench.audit.gpu_compile import main

sys.exit(main())
