"""Time model_new.py against eager PyTorch and torch.compile. Run: python3 -m utils.profiling"""

import sys

from cuda_agent.sandbox_pool.workspace.skill_scripts import profiling_main

if __name__ == "__main__":
    sys.exit(profiling_main())
