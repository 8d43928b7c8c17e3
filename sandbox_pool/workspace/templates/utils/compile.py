"""Compile kernels/ into cuda_extension (content-addressed cache). Run: bash utils/compile.sh"""

import sys

from cuda_agent.sandbox_pool.workspace.skill_scripts import compile_main

if __name__ == "__main__":
    sys.exit(compile_main())
