"""The `cuda-agent` command line. Each command group lives beside the code it drives."""
