"""Check model_new.py against model.py on fresh random inputs. Run: python3 -m utils.verification"""

import sys

from cuda_agent.sandbox_pool.workspace.skill_scripts import verification_main

if __name__ == "__main__":
    sys.exit(verification_main())
