"""Device-parametrised re-creations of the official CUDA-Agent agent_workdir/utils scripts.

Written for this benchmark after reading BytedTsinghua-SIA/CUDA-Agent's agent_workdir/utils
(compile.sh / compile.py, verification.py, profiling.py); no code is copied. Same steps:
a forced rebuild with torch.utils.cpp_extension.load, 5 correctness checks in the
workspace process, and a torch.profiler timing of the extension, eager PyTorch and
torch.compile in the workspace process. `--device cpu` swaps .cuda() for .to("cpu") and
the CUDA profiler activity for the CPU one, so the same steps run on a CPU machine.
Run from a workspace copy: ``python3 -m official_style.compile`` (etc.), OFFICIAL_DEVICE=cpu|cuda.
"""
