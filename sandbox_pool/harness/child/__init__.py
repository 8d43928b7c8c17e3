"""Code that runs inside the short-lived evaluation child process.

Everything here is trusted and is loaded into the child *before* any candidate code, with
references to timers and synchronisation captured at import time.
"""
