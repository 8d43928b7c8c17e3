"""``VERL_PLATFORM=cpu``: veRL's platform interface on a machine without accelerators (see platform.py)."""
